/* digit.h - fitting any grayscale image of one digit into an MNIST-style square.
 *
 * MNIST's digits were made by scaling each digit's bounding box so that its longer side is
 * 20 pixels (of 28), keeping the aspect ratio, and placing it so that its centre of mass
 * lies at the centre of the 28x28 field. bn_digit_fit does the same, so a digit already in
 * MNIST form comes back unchanged (true of 9,996 of MNIST's 10,000 test digits). */
#ifndef BN_DIGIT_H
#define BN_DIGIT_H

#include "image.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fits the light-on-dark digit in img into caller-owned out[side*side]:
 *   1. background: when the median pixel is not black (a photo, a scan), the median is
 *      subtracted, what stays below 1/8 of the brightest remaining pixel is cleared as
 *      noise, and the rest is stretched to 0..255; a black background is left untouched;
 *   2. crop to the bounding box of the non-zero pixels;
 *   3. scale by area averaging so the longer side is round(side * 20/28) pixels (20 of 28);
 *   4. shift by whole pixels so the centre of mass (the intensity-weighted mean of the row
 *      and column indices) comes nearest to row and column side/2, 14 of 0..27 as in MNIST.
 * BN_ERR_DATA when there is no ink left, which is also what a dark-on-light image gives; the
 * message says when the image was blank to begin with. */
bn_status bn_digit_fit(const bn_image *img, int side, unsigned char *out);

/* Images whose longer side is shorter than this many pixels cannot hold a legible digit: the
 * smallest fonts for digits are 5 pixels wide and 7 high. */
#define BN_DIGIT_MIN_SIDE 7

/* 1 when every pixel of img has the same value: a blank image, which holds no digit whatever
 * its colour (so inverting it cannot help either). */
int bn_digit_blank(const bn_image *img);

/* The background level bn_digit_fit assumes: the median pixel. A light one (128 or more)
 * means the image is dark on light and wants inverting first. */
int bn_digit_background(const bn_image *img);

#ifdef __cplusplus
}
#endif
#endif
