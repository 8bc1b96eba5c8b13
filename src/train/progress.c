#include "progress.h"

#include <string.h>
#include <sys/ioctl.h>

#include "core/clock.h"

#define MIN_BAR_CELLS 5
#define MAX_BAR_CELLS 30

void bn_progress_init(bn_progress *p, FILE *out)
{
    *p = (bn_progress){.out = out, .width = 80, .interval = 0.1, .last_draw = -1.0};
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) p->width = ws.ws_col;
}

/* "m:ss", or "h:mm:ss" from an hour on; "-:--" when unknown. */
static void format_duration(char *buf, size_t cap, double seconds)
{
    if (!(seconds >= 0) || seconds > 1e8) {
        snprintf(buf, cap, "-:--");
        return;
    }
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(buf, cap, "%ld:%02ld", s / 60, s % 60);
}

void bn_progress_format(char *buf, size_t cap, int width, const bn_step_info *info, double loss, double acc)
{
    double done = info->count > 0 ? (double)info->seen / info->count : 0.0;
    double rate = info->seconds > 0 ? info->images / info->seconds : 0.0;
    char head[64], tail[192], eta[32], bar[MAX_BAR_CELLS + 1], per_gpu[32] = "";
    format_duration(eta, sizeof eta, rate > 0 ? (info->count - info->seen) / rate : -1.0);
    int h = snprintf(head, sizeof head, "epoch %d/%d %3d%% ", info->epoch, info->epochs, (int)(100.0 * done));
    /* Fixed widths, so the line does not jitter as it is redrawn. */
    int digits = snprintf(NULL, 0, "%d", info->batches);
    if (info->gpus > 1) snprintf(per_gpu, sizeof per_gpu, " (%6.0f/GPU)", rate / info->gpus);
    int t = snprintf(tail, sizeof tail, "%*d/%d  %6.0f img/s%s  loss %.4f  acc %6.2f%%  ETA %s", digits, info->batch,
                     info->batches, rate, per_gpu, loss, 100.0 * acc, eta);
    /* The bar takes the columns the numbers leave, between its brackets and a space. */
    int cells = width - 1 - h - t - 3;
    if (cells > MAX_BAR_CELLS) cells = MAX_BAR_CELLS;
    if (cells < MIN_BAR_CELLS) {
        snprintf(buf, cap, "%s%s", head, tail);
        return;
    }
    int filled = (int)(done * cells);
    for (int i = 0; i < cells; i++) bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
    bar[cells] = '\0';
    snprintf(buf, cap, "%s[%s] %s", head, bar, tail);
}

static void draw(bn_progress *p, const char *line, double now)
{
    int cut = p->width - 1;
    fprintf(p->out, "\r%.*s\033[K", cut, line);
    fflush(p->out);
    p->shown = 1;
    p->last_draw = now;
    p->draws++;
}

void bn_progress_clear(bn_progress *p)
{
    if (!p->shown) return;
    fputs("\r\033[K", p->out);
    fflush(p->out);
    p->shown = 0;
}

bn_status bn_progress_update(bn_progress *p, bn_progress_event event, const bn_step_info *info, double now)
{
    char line[256];
    switch (event) {
    case BN_PROGRESS_STEP: {
        if (p->last_draw >= 0 && now - p->last_draw < p->interval) return BN_OK;
        double loss, acc;
        BN_TRY(bn_step_running_metrics(info, &loss, &acc));
        bn_progress_format(line, sizeof line, p->width, info, loss, acc);
        draw(p, line, now);
        return BN_OK;
    }
    case BN_PROGRESS_EVAL:
        snprintf(line, sizeof line, "epoch %d/%d  evaluating on the test set...", info->epoch, info->epochs);
        draw(p, line, now);
        return BN_OK;
    case BN_PROGRESS_DONE:
        bn_progress_clear(p);
        p->last_draw = -1.0; /* the next epoch's first step draws at once */
        return BN_OK;
    }
    return BN_OK;
}

bn_status bn_progress_hook(void *user, bn_progress_event event, const bn_step_info *info)
{
    return bn_progress_update(user, event, info, bn_clock_seconds());
}
