/* supervise.c - a group of child processes that live and die together (supervise.h).
 *
 * The signals the supervisor acts on (SIGCHLD and the three stop signals) are blocked and taken
 * with sigtimedwait, so there is no handler and no race between a child ending and the wait for
 * it. Each child runs in a process group of its own: a Ctrl-C on the terminal then reaches the
 * supervisor alone, which passes it on exactly once (the trainer treats a second SIGINT as "stop
 * without saving"). */
#include "supervise.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"

typedef struct child {
    pid_t pid;
    int running;
    int status;              /* waitpid's, once it has ended */
} child;

/* Appends s to the line at *len (cap bytes, room kept for the final newline), cutting it short
 * where it does not fit; only plain copies, which are safe after fork. */
static void append(char *line, size_t cap, size_t *len, const char *s)
{
    while (*s && *len + 2 < cap) line[(*len)++] = *s++;
}

/* In the child after fork: only calls that are safe there, up to the exec. */
static void exec_child(const bn_children *c, int i, pid_t parent, const sigset_t *mask)
{
    setpgid(0, 0);
    /* Dies with the supervisor; the check after it closes the window where the supervisor died
     * before the request was made. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(137);
    sigprocmask(SIG_SETMASK, mask, NULL);
    execv(c->path, c->argv[i]);
    /* One write, so that two children failing together cannot interleave their lines. */
    char line[1024];
    size_t len = 0;
    append(line, sizeof line, &len, "blobnet: error: ");
    append(line, sizeof line, &len, c->name[i]);
    append(line, sizeof line, &len, ": cannot execute ");
    append(line, sizeof line, &len, c->path);
    line[len++] = '\n';
    ssize_t unused = write(STDERR_FILENO, line, len);
    (void)unused;
    _exit(127);
}

static void signal_running(child *k, int n, int sig)
{
    for (int i = 0; i < n; i++)
        if (k[i].running) kill(k[i].pid, sig);
}

static int count_running(const child *k, int n)
{
    int r = 0;
    for (int i = 0; i < n; i++) r += k[i].running;
    return r;
}

/* The exit code a shell reports for a wait status. */
static int exit_code_of(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Whether a child exited with the code of a clean stop on SIGINT, SIGTERM or SIGHUP. */
static int stopped_cleanly(int status)
{
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    return code == 128 + SIGINT || code == 128 + SIGTERM || code == 128 + SIGHUP;
}

/* What the supervision loop has seen so far. */
typedef struct watch {
    int first;               /* the first child that failed, -1 while none has */
    int first_after_signal;  /* it failed after a stop signal was passed on */
    int passed;              /* the last stop signal passed on, 0 while none */
    int stopped_others;      /* others were running when the first failed, and were stopped */
    double kill_at;          /* when to SIGKILL the children that were asked to stop; 0: never */
} watch;

/* Collects every child that has ended; the first to fail stops the rest, unless a stop signal
 * passed on already asked them all to end. */
static void reap(const bn_children *c, child *k, watch *w)
{
    for (int i = 0; i < c->n; i++) {
        if (!k[i].running || waitpid(k[i].pid, &k[i].status, WNOHANG) != k[i].pid) continue;
        k[i].running = 0;
        if (exit_code_of(k[i].status) == 0 || w->first >= 0) continue;
        w->first = i;
        int stopped = stopped_cleanly(k[i].status);
        w->first_after_signal = w->passed != 0 || stopped;
        if (w->passed || count_running(k, c->n) == 0) continue;
        if (stopped) {
            w->kill_at = bn_clock_seconds() + c->stop_grace_s;
            continue;
        }
        signal_running(k, c->n, SIGTERM);
        w->stopped_others = 1;
        w->kill_at = bn_clock_seconds() + c->grace_s;
    }
}

/* Waits for the children until all have ended, acting on signals meanwhile. */
static void supervise_loop(const bn_children *c, child *k, const sigset_t *watched, watch *w)
{
    for (;;) {
        reap(c, k, w);
        if (count_running(k, c->n) == 0) return;
        double left = 1.0;
        if (w->kill_at > 0) {
            left = w->kill_at - bn_clock_seconds();
            if (left <= 0) {
                signal_running(k, c->n, SIGKILL);
                w->kill_at = 0;
                continue;
            }
        }
        /* At most a second between reaps: a SIGCHLD can be taken by a thread this process did
         * not make (a device runtime's), which drops it, and then only the reap sees the end. */
        if (left > 1.0) left = 1.0;
        struct timespec ts = {.tv_sec = (time_t)left, .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
        int sig = sigtimedwait(watched, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
            w->passed = sig;
            signal_running(k, c->n, sig);
        }
    }
}

/* Takes every watched signal still pending, so that none acts on this process once they are
 * unblocked: the children it was meant for have ended. */
static void drain(const sigset_t *watched)
{
    struct timespec zero = {0, 0};
    while (sigtimedwait(watched, NULL, &zero) > 0) {}
}

static bn_status report(const bn_children *c, const child *k, const watch *w, int *exit_code)
{
    if (w->first < 0) {
        *exit_code = 0;
        return BN_OK;
    }
    int st = k[w->first].status;
    *exit_code = exit_code_of(st);
    if (w->first_after_signal) return BN_ERR_INTERRUPTED;
    char how[128];
    if (WIFEXITED(st)) snprintf(how, sizeof how, "exited with code %d", WEXITSTATUS(st));
    else snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    return bn_error(BN_ERR_IO, "%s %s%s%s%s", c->name[w->first], how, w->stopped_others ? "; the other " : "",
                    w->stopped_others ? c->plural : "", w->stopped_others ? " were stopped" : "");
}

/* The signals the supervisor takes. */
static const int taken_signals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

static void watched_set(sigset_t *set)
{
    sigemptyset(set);
    for (size_t t = 0; t < sizeof taken_signals / sizeof taken_signals[0]; t++) sigaddset(set, taken_signals[t]);
}

void bn_supervise_take_signals(void)
{
    sigset_t watched;
    watched_set(&watched);
    pthread_sigmask(SIG_BLOCK, &watched, NULL);
}

bn_status bn_supervise(const bn_children *c, int *exit_code)
{
    *exit_code = 1;
    if (c->n < 1 || c->n > 4096) return bn_error(BN_ERR_USAGE, "cannot run %d %s: 1 to 4096", c->n, c->plural);
    child *k = calloc((size_t)c->n, sizeof *k);
    if (!k) return bn_error(BN_ERR_NOMEM, "no memory to watch %d %s", c->n, c->plural);
    sigset_t watched, old, for_children;
    watched_set(&watched);
    /* SIGCHLD set to be ignored would reap the children behind waitpid's back. */
    struct sigaction dfl = {.sa_handler = SIG_DFL}, old_chld;
    sigemptyset(&dfl.sa_mask);
    if (sigprocmask(SIG_BLOCK, &watched, &old) != 0 || sigaction(SIGCHLD, &dfl, &old_chld) != 0) {
        free(k);
        return bn_error(BN_ERR_IO, "cannot take the signals that %s need: %s", c->plural, strerror(errno));
    }
    /* The children start with the watched signals unblocked, whatever this thread had blocked
     * before (bn_supervise_take_signals). */
    for_children = old;
    for (size_t t = 0; t < sizeof taken_signals / sizeof taken_signals[0]; t++)
        sigdelset(&for_children, taken_signals[t]);
    fflush(NULL); /* buffered output must not be written twice, by a child too */
    pid_t self = getpid();
    bn_status s = BN_OK;
    for (int i = 0; i < c->n; i++) {
        pid_t pid = fork();
        if (pid == 0) exec_child(c, i, self, &for_children);
        if (pid < 0) {
            s = bn_error(BN_ERR_IO, "cannot start %s: %s", c->name[i], strerror(errno));
            signal_running(k, i, SIGKILL);
            for (int j = 0; j < i; j++) waitpid(k[j].pid, &k[j].status, 0);
            break;
        }
        setpgid(pid, pid); /* also here, so that no signal finds the child still in ours */
        k[i] = (child){.pid = pid, .running = 1};
    }
    if (s == BN_OK) {
        watch w = {.first = -1};
        supervise_loop(c, k, &watched, &w);
        s = report(c, k, &w, exit_code);
    }
    drain(&watched);
    sigaction(SIGCHLD, &old_chld, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    free(k);
    return s;
}
