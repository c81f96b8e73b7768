/* pty_drive: runs a command on a pseudo-terminal and plays a script against it, as a user at a terminal would:
 * each step waits for text to appear (-e TEXT), types bytes (-s BYTES, with \r \n \e \xHH escapes) or pauses
 * (-w MS: a prompt is printed just before the terminal is switched to raw mode, so a key that must reach the
 * line editor, not the tty driver, waits a moment), so the test follows the program instead of guessing its
 * timing. Everything the program writes goes to OUT.
 *   pty_drive OUT TIMEOUT_S [-e TEXT | -s BYTES | -w MS]... -- CMD [ARGS...]
 * Exit: the command's status (128+signal if killed), 124 if a wait or the exit timed out (the child is killed). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char seen[1 << 20];
static size_t n_seen, matched;   /* text the child wrote; where the last expected text ended */
static FILE *out;
static double deadline;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reads what the child wrote, waiting up to ms milliseconds: 1 if it read some, 0 if none came, -1 at the end. */
static int pump(int fd, int ms) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, ms) <= 0) return 0;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return -1;
    fwrite(buf, 1, (size_t)n, out);
    fflush(out);
    size_t k = (size_t)n < sizeof seen - n_seen ? (size_t)n : sizeof seen - n_seen;
    memcpy(seen + n_seen, buf, k);
    n_seen += k;
    return 1;
}

static size_t unescape(const char *s, char *d) {
    size_t n = 0;
    for (; *s; s++) {
        if (*s != '\\' || !s[1]) { d[n++] = *s; continue; }
        switch (*++s) {
        case 'r': d[n++] = '\r'; break;
        case 'n': d[n++] = '\n'; break;
        case 'e': d[n++] = 27; break;
        case 'x': { unsigned v; if (sscanf(s + 1, "%2x", &v) == 1) { d[n++] = (char)v; s += 2; } break; }
        default: d[n++] = *s;
        }
    }
    return n;
}

int main(int argc, char **argv) {
    int cmd = 3;
    while (cmd < argc && strcmp(argv[cmd], "--")) cmd++;
    if (argc < 5 || cmd >= argc - 1) {
        fprintf(stderr, "usage: pty_drive OUT TIMEOUT_S [-e TEXT | -s BYTES | -w MS]... -- CMD [ARGS...]\n");
        return 2;
    }
    if (!(out = fopen(argv[1], "w"))) { perror(argv[1]); return 2; }
    deadline = now() + atof(argv[2]);
    int fd;
    pid_t pid = forkpty(&fd, NULL, NULL, NULL);
    if (pid < 0) { perror("forkpty"); return 2; }
    if (pid == 0) { execvp(argv[cmd + 1], argv + cmd + 1); perror(argv[cmd + 1]); _exit(127); }
    int rc = 0;
    for (int i = 3; i + 1 < cmd && !rc; i += 2) {
        if (!strcmp(argv[i], "-w")) {
            double until = now() + atof(argv[i + 1]) / 1e3;
            while (now() < until && pump(fd, 10) >= 0) {}
        } else if (!strcmp(argv[i], "-s")) {
            char b[1024];
            size_t n = unescape(argv[i + 1], b);
            if (write(fd, b, n) != (ssize_t)n) rc = 124;
        } else {
            const char *want = argv[i + 1];
            char *at;
            for (;;) {
                seen[n_seen] = 0;
                if ((at = memmem(seen + matched, n_seen - matched, want, strlen(want)))) break;
                if (now() > deadline || pump(fd, 50) < 0) {
                    fprintf(stderr, "pty_drive: never saw '%s'\n", want);
                    rc = 124;
                    break;
                }
            }
            if (!rc) matched = (size_t)(at - seen) + strlen(want);
        }
    }
    int st = 0;
    for (;;) {   /* drain the output until the child exits */
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (rc || now() > deadline) {
            if (!rc) fprintf(stderr, "pty_drive: the command did not exit in time\n");
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return 124;
        }
        if (pump(fd, 50) < 0) usleep(10000);
    }
    while (pump(fd, 0) > 0) {}
    fclose(out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
