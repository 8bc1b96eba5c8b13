/* main.c - the blobnet command line. */
#include <stdio.h>

int main(void)
{
    puts("blobnet");
    return 0;
}
