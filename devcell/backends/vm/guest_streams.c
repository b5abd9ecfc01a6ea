/* DevCell's stream helper inside a vm cell's guest (/.devcell-guest/streams).
 *
 * Why: qemu-guest-agent runs a command and hands back its output when it ends (no stdin
 * stream, no terminal). This helper serves the virtio-serial ports named dev.devcell.streams.N:
 * on each, the host opens channels that run a command (pipes or a pseudo-terminal, window size,
 * signals, stdin half-close, exit status) or connect to a TCP port on the guest's 127.0.0.1.
 * The protocol is the one devcell/backends/vm/streams_codec.py describes; both sides bound
 * every length by construction (a u16 length) and send payload only within the peer's credit.
 * One process, one poll loop, no threads; it never blocks on a port or a child's descriptor.
 * Built by gcc -static at image build time (vm/streams_build.py), cached by this file's hash.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 16
#define MAX_CHANNELS 64
#define HEADER 7
#define MAX_PAYLOAD 65535
#define WINDOW (256 * 1024)
#define OUT_MAX (1024 * 1024)
#define CHUNK 32768
#define MAX_ARGS 4096
#define MAX_ENV 512

enum { T_PAD = 0, T_HELLO = 1, T_EXEC = 2, T_CONNECT = 3, T_DATA = 4, T_EOF = 5, T_RESIZE = 6,
       T_SIGNAL = 7, T_CLOSE = 8, T_CREDIT = 9,
       G_OPENED = 10, G_FAILED = 11, G_OUT = 12, G_ERR = 13, G_EXIT = 14, G_EOF = 15,
       G_CREDIT = 16, G_CLOSED = 17 };

static const char SYNC[16] = "DEVCELL-STREAM-1";

struct channel {
    uint32_t id;
    int used, is_tcp, connecting;
    pid_t pid;
    int in_fd, out_fd, err_fd;      /* stdin (or the pty master, or the socket), stdout, stderr */
    int exited, status_kind, status_value, in_eof_asked, out_done, err_done, pty;
    uint32_t credit;                /* bytes we may still send the host */
    unsigned char *in;              /* what the host sent, not yet written (at most WINDOW) */
    size_t in_len, in_written_since_credit;
};

struct port {
    int fd, connected, synced;
    struct timespec checked;
    unsigned char inbuf[HEADER + MAX_PAYLOAD];
    size_t in_len;
    unsigned char *out;
    size_t out_len;
    struct channel ch[MAX_CHANNELS];
};

static struct port ports[MAX_PORTS];
static int nports;
static int sigfd;

static void put16(unsigned char *p, unsigned v) { p[0] = v & 0xff; p[1] = (v >> 8) & 0xff; }
static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (v >> (8 * i)) & 0xff; }
static unsigned get16(const unsigned char *p) { return p[0] | (p[1] << 8); }
static uint32_t get32(const unsigned char *p) { return p[0] | (p[1] << 8) | (p[2] << 16) | ((uint32_t)p[3] << 24); }

static void nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static int room(struct port *p, size_t n) { return p->out_len + HEADER + n <= OUT_MAX; }
/* Data leaves RESERVE free, so credits, exits and failures always fit after it. */
#define RESERVE 8192
static int data_room(struct port *p, size_t n) { return p->out_len + HEADER + n + RESERVE <= OUT_MAX; }

static void frame(struct port *p, int type, uint32_t chan, const void *data, size_t n) {
    if (!room(p, n)) return;  /* only control frames are sent without room checked first */
    unsigned char *o = p->out + p->out_len;
    o[0] = type; put16(o + 1, n); put32(o + 3, chan);
    if (n) memcpy(o + HEADER, data, n);
    p->out_len += HEADER + n;
}

static void failed(struct port *p, uint32_t id, const char *what, int err) {
    char msg[256];
    int n = snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
    frame(p, G_FAILED, id, msg, n < 0 ? 0 : (size_t)n > sizeof msg - 1 ? sizeof msg - 1 : (size_t)n);
}

static void close_fd(int *fd) { if (*fd >= 0) close(*fd); *fd = -1; }

static void release(struct channel *c) {
    if (c->pid > 0 && !c->exited) kill(-c->pid, SIGKILL);
    int same = c->out_fd == c->in_fd;
    close_fd(&c->in_fd);
    if (same) c->out_fd = -1;
    close_fd(&c->out_fd);
    close_fd(&c->err_fd);
    free(c->in);
    memset(c, 0, sizeof *c);
    c->in_fd = c->out_fd = c->err_fd = -1;
}

/* A new session (HELLO) or none (the host went away): every channel ended, nothing queued
 * for the host; what the host sent after HELLO stays in inbuf. */
static void reset(struct port *p) {
    for (int i = 0; i < MAX_CHANNELS; i++) if (p->ch[i].used) release(&p->ch[i]);
    p->out_len = 0; p->synced = 0;
}

static struct channel *find(struct port *p, uint32_t id) {
    for (int i = 0; i < MAX_CHANNELS; i++) if (p->ch[i].used && p->ch[i].id == id) return &p->ch[i];
    return NULL;
}

static struct channel *fresh(struct port *p, uint32_t id) {
    if (id == 0 || find(p, id)) return NULL;
    for (int i = 0; i < MAX_CHANNELS; i++) {
        struct channel *c = &p->ch[i];
        if (!c->used) {
            memset(c, 0, sizeof *c);
            c->in_fd = c->out_fd = c->err_fd = -1;
            c->in = malloc(WINDOW);
            if (!c->in) return NULL;
            c->used = 1; c->id = id; c->credit = WINDOW;
            return c;
        }
    }
    return NULL;
}

/* A user as "uid[:gid]" or a name in the guest's /etc/passwd; -1 when unknown. */
static int resolve_user(const char *user, uid_t *uid, gid_t *gid, char *home, size_t home_n) {
    char *end;
    unsigned long u = strtoul(user, &end, 10);
    if (end != user && (*end == 0 || *end == ':')) {
        *uid = u; *gid = u;
        if (*end == ':') { unsigned long g = strtoul(end + 1, &end, 10); if (*end) return -1; *gid = g; }
        home[0] = 0;
        return 0;
    }
    FILE *f = fopen("/etc/passwd", "re");
    if (!f) return -1;
    char line[1024];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        char *fields[7]; int n = 0; char *s = line;
        for (; n < 7; n++) { fields[n] = strsep(&s, ":"); if (!fields[n]) break; }
        if (n < 6 || strcmp(fields[0], user) != 0) continue;
        *uid = strtoul(fields[2], NULL, 10); *gid = strtoul(fields[3], NULL, 10);
        snprintf(home, home_n, "%s", fields[5]);
        found = 0;
        break;
    }
    fclose(f);
    return found;
}

static void child_fail(int errfd, const char *stage) {
    int e = errno;
    char msg[200];
    int n = snprintf(msg, sizeof msg, "%s: %s", stage, strerror(e));
    if (n > 0) { ssize_t w = write(errfd, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1); (void)w; }
    _exit(127);
}

static void start_exec(struct port *p, uint32_t id, const unsigned char *d, size_t n) {
    if (n < 9) return;
    int pty = d[0] & 1;
    unsigned rows = get16(d + 1), cols = get16(d + 3), argc = get16(d + 5), envc = get16(d + 7);
    if (argc < 1 || argc > MAX_ARGS || envc > MAX_ENV) { frame(p, G_FAILED, id, "bad request", 11); return; }
    char *strs[2 + MAX_ARGS + MAX_ENV + 1];
    size_t at = 9, want = 2 + argc + envc;
    for (size_t i = 0; i < want; i++) {
        const unsigned char *z = memchr(d + at, 0, n - at);
        if (!z) { frame(p, G_FAILED, id, "bad request", 11); return; }
        strs[i] = (char *)d + at;
        at = (size_t)(z - d) + 1;
    }
    struct channel *c = fresh(p, id);
    if (!c) { frame(p, G_FAILED, id, "too many channels", 17); return; }
    char *user = strs[0], *cwd = strs[1];
    char **argv = strs + 2, **envp = strs + 2 + argc;
    char *args[MAX_ARGS + 1], *env[MAX_ENV + 4];
    memcpy(args, argv, argc * sizeof *args); args[argc] = NULL;
    memcpy(env, envp, envc * sizeof *env);
    size_t ne = envc;
    uid_t uid = 0; gid_t gid = 0; char home[512] = "", home_env[600], user_env[300];
    int as_user = user[0] != 0;
    if (as_user && resolve_user(user, &uid, &gid, home, sizeof home) != 0) {
        char msg[300]; int m = snprintf(msg, sizeof msg, "no user %s in the cell", user);
        frame(p, G_FAILED, id, msg, m > 0 ? (size_t)m : 0); release(c); return;
    }
    if (home[0]) {
        snprintf(home_env, sizeof home_env, "HOME=%s", home); env[ne++] = home_env;
        snprintf(user_env, sizeof user_env, "USER=%s", user); env[ne++] = user_env;
    }
    env[ne] = NULL;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, report[2], master = -1;
    char slave_name[64];
    if (pty) {
        master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (master < 0 || grantpt(master) || unlockpt(master) ||
            ptsname_r(master, slave_name, sizeof slave_name)) {
            failed(p, id, "a pseudo-terminal", errno); if (master >= 0) close(master); release(c); return;
        }
        struct winsize ws = { .ws_row = rows, .ws_col = cols };
        if (rows && cols) ioctl(master, TIOCSWINSZ, &ws);
    } else if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
        failed(p, id, "pipes", errno);
        for (int i = 0; i < 2; i++) { if (in[i] >= 0) close(in[i]); if (out[i] >= 0) close(out[i]); if (err[i] >= 0) close(err[i]); }
        release(c); return;
    }
    if (pipe2(report, O_CLOEXEC)) { failed(p, id, "a pipe", errno); release(c); return; }
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t all; sigemptyset(&all); sigprocmask(SIG_SETMASK, &all, NULL);
        /* The init started us as an asynchronous list, which ignores SIGINT and SIGQUIT: a
         * command gets every signal's default back (so ^C on its terminal interrupts it). */
        for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);
        close(report[0]);
        setsid();
        if (pty) {
            int s = open(slave_name, O_RDWR);
            if (s < 0) child_fail(report[1], "the pseudo-terminal");
            ioctl(s, TIOCSCTTY, 0);
            dup2(s, 0); dup2(s, 1); dup2(s, 2);
            if (s > 2) close(s);
        } else {
            dup2(in[0], 0); dup2(out[1], 1); dup2(err[1], 2);
        }
        if (as_user) {
            if (setgroups(1, &gid) || setgid(gid) || setuid(uid)) child_fail(report[1], "changing user");
        }
        if (cwd[0] && chdir(cwd)) child_fail(report[1], cwd);
        execve(args[0], args, env);
        child_fail(report[1], args[0]);
    }
    close(report[1]);
    if (pid < 0) { failed(p, id, "fork", errno); close(report[0]); if (master >= 0) close(master); release(c); return; }
    char msg[256];
    ssize_t got;
    do got = read(report[0], msg, sizeof msg); while (got < 0 && errno == EINTR);
    close(report[0]);
    c->pid = pid;
    if (pty) {
        c->pty = 1; c->in_fd = c->out_fd = master; c->err_done = 1; nonblock(master);
    } else {
        close(in[0]); close(out[1]); close(err[1]);
        c->in_fd = in[1]; c->out_fd = out[0]; c->err_fd = err[0];
        nonblock(c->in_fd); nonblock(c->out_fd); nonblock(c->err_fd);
    }
    if (got > 0) {  /* exec failed: said once, the child reaped by the SIGCHLD loop */
        frame(p, G_FAILED, id, msg, (size_t)got);
        c->exited = 1; release(c);
        return;
    }
    frame(p, G_OPENED, id, NULL, 0);
}

static void start_connect(struct port *p, uint32_t id, const unsigned char *d, size_t n) {
    if (n != 2) return;
    struct channel *c = fresh(p, id);
    if (!c) { frame(p, G_FAILED, id, "too many channels", 17); return; }
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) { failed(p, id, "socket", errno); release(c); return; }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(get16(d)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    c->is_tcp = 1; c->in_fd = c->out_fd = s; c->err_done = 1;
    if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) { frame(p, G_OPENED, id, NULL, 0); return; }
    if (errno != EINPROGRESS) { failed(p, id, "connect", errno); release(c); return; }
    c->connecting = 1;
}

static void on_frame(struct port *p, int type, uint32_t id, const unsigned char *d, size_t n) {
    struct channel *c = find(p, id);
    unsigned char b[4];
    switch (type) {
    case T_EXEC: start_exec(p, id, d, n); break;
    case T_CONNECT: start_connect(p, id, d, n); break;
    case T_DATA:
        if (!c || c->in_eof_asked) break;
        if (n > WINDOW - c->in_len) n = WINDOW - c->in_len;  /* over its credit: dropped */
        memcpy(c->in + c->in_len, d, n); c->in_len += n;
        break;
    case T_EOF: if (c) c->in_eof_asked = 1; break;
    case T_RESIZE:
        if (c && c->pty && n == 4) {
            struct winsize ws = { .ws_row = get16(d), .ws_col = get16(d + 2) };
            ioctl(c->in_fd, TIOCSWINSZ, &ws);
        }
        break;
    case T_SIGNAL: if (c && c->pid > 0 && !c->exited && n == 1 && d[0] > 0 && d[0] < 65) kill(-c->pid, d[0]); break;
    case T_CLOSE: if (c) release(c); break;
    case T_CREDIT:
        if (c && n == 4) { uint32_t more = get32(d); c->credit = more > WINDOW - c->credit ? WINDOW : c->credit + more; }
        break;
    default: (void)b; break;
    }
}

static void read_port(struct port *p) {
    for (;;) {
        size_t want = sizeof p->inbuf - p->in_len;
        if (want == 0) break;
        ssize_t r = read(p->fd, p->inbuf + p->in_len, want);
        if (r <= 0) break;
        p->in_len += (size_t)r;
        size_t at = 0;
        while (at < p->in_len) {
            unsigned char *f = p->inbuf + at;
            if (f[0] == T_PAD) { at++; continue; }
            if (p->in_len - at < HEADER) break;
            size_t n = get16(f + 1);
            if (p->in_len - at < HEADER + n) break;
            uint32_t id = get32(f + 3);
            if (f[0] == T_HELLO && n == 16) {
                reset(p);
                memcpy(p->out, SYNC, 16); memcpy(p->out + 16, f + HEADER, 16); p->out_len = 32;
                p->synced = 1;
            } else if (p->synced && p->out_len + 2 * (HEADER + 256) <= OUT_MAX) {
                on_frame(p, f[0], id, f + HEADER, n);
            } else if (p->synced) {
                break;  /* the host is not reading our answers: read no more until it does */
            }
            at += HEADER + n;
        }
        memmove(p->inbuf, p->inbuf + at, p->in_len - at);
        p->in_len -= at;
        if (at == 0) break;
    }
}

static void pump_out(struct port *p, struct channel *c, int fd, int type, int *done) {
    if (*done || c->connecting) return;
    size_t n = CHUNK;
    if (n > c->credit) n = c->credit;
    if (n == 0 || !data_room(p, n)) return;
    unsigned char *o = p->out + p->out_len;
    ssize_t r = read(fd, o + HEADER, n);
    if (r > 0) {
        o[0] = type; put16(o + 1, (unsigned)r); put32(o + 3, c->id);
        p->out_len += HEADER + (size_t)r; c->credit -= (uint32_t)r;
    } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        *done = 1;  /* EOF, or EIO on a pty master once every slave is closed */
        if (c->is_tcp) frame(p, G_EOF, c->id, NULL, 0);
    }
}

static void pump_in(struct port *p, struct channel *c) {
    if (c->connecting || c->in_fd < 0) return;
    if (c->in_len) {
        ssize_t w = write(c->in_fd, c->in, c->in_len);
        if (w > 0) {
            memmove(c->in, c->in + w, c->in_len - w); c->in_len -= (size_t)w;
            c->in_written_since_credit += (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            c->in_len = 0; c->in_eof_asked = 1;  /* the command closed its input */
        }
        if (c->in_written_since_credit >= WINDOW / 4 || (c->in_len == 0 && c->in_written_since_credit)) {
            unsigned char b[4]; put32(b, (uint32_t)c->in_written_since_credit);
            frame(p, G_CREDIT, c->id, b, 4); c->in_written_since_credit = 0;
        }
    }
    if (c->in_len == 0 && c->in_eof_asked == 1) {
        c->in_eof_asked = 2;
        if (c->is_tcp) shutdown(c->in_fd, SHUT_WR);
        else if (!c->pty) close_fd(&c->in_fd);
        else { unsigned char eot = 4; ssize_t w = write(c->in_fd, &eot, 1); (void)w; }
    }
}

static void finish(struct port *p, struct channel *c) {
    if (c->is_tcp) {
        if (c->out_done && c->in_eof_asked == 2 && c->in_len == 0) { frame(p, G_CLOSED, c->id, NULL, 0); release(c); }
        return;
    }
    if (!c->exited) return;
    if (c->pty && !c->out_done) {  /* the shell ended: what the terminal still holds, then done
                                    * (a background process keeping it open is not waited for) */
        struct pollfd q = { .fd = c->out_fd, .events = POLLIN };
        if (poll(&q, 1, 0) <= 0 || !(q.revents & POLLIN)) c->out_done = 1;
    }
    if (c->out_done && c->err_done && room(p, 2)) {
        unsigned char b[2] = { (unsigned char)c->status_kind, (unsigned char)c->status_value };
        frame(p, G_EXIT, c->id, b, 2);
        release(c);
    }
}

static void reap(void) {
    struct signalfd_siginfo si;
    while (read(sigfd, &si, sizeof si) > 0) {}
    int status; pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < nports; i++) for (int j = 0; j < MAX_CHANNELS; j++) {
            struct channel *c = &ports[i].ch[j];
            if (c->used && c->pid == pid && !c->exited) {
                c->exited = 1;
                if (WIFSIGNALED(status)) { c->status_kind = 1; c->status_value = WTERMSIG(status); }
                else c->status_value = WEXITSTATUS(status);
            }
        }
    }
}

static void find_ports(void) {
    DIR *d = opendir("/sys/class/virtio-ports");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) && nports < MAX_PORTS) {
        char path[300], name[64] = "";
        snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", e->d_name);
        FILE *f = fopen(path, "re");
        if (!f) continue;
        if (!fgets(name, sizeof name, f)) name[0] = 0;
        fclose(f);
        if (strncmp(name, "dev.devcell.streams.", 20) != 0) continue;
        snprintf(path, sizeof path, "/dev/%s", e->d_name);
        int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) continue;
        struct port *p = &ports[nports++];
        p->fd = fd; p->out = malloc(OUT_MAX);
        if (!p->out) exit(1);
        for (int j = 0; j < MAX_CHANNELS; j++) p->ch[j].in_fd = p->ch[j].out_fd = p->ch[j].err_fd = -1;
    }
    closedir(d);
}

static long since_ms(struct timespec *t) {
    struct timespec now; clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000;
}

int main(void) {
    sigset_t set; sigemptyset(&set); sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    find_ports();
    if (nports == 0) return 2;
    struct pollfd fds[1 + MAX_PORTS * (1 + MAX_CHANNELS * 3)];
    struct { int port, chan, role; } who[sizeof fds / sizeof fds[0]];
    for (;;) {
        int n = 0, waiting = 0;
        fds[n].fd = sigfd; fds[n].events = POLLIN; who[n].port = -1; n++;
        for (int i = 0; i < nports; i++) {
            struct port *p = &ports[i];
            if (!p->connected) {
                if (since_ms(&p->checked) < 200) { waiting = 1; continue; }
                clock_gettime(CLOCK_MONOTONIC, &p->checked);
            }
            fds[n].fd = p->fd; fds[n].events = POLLIN | (p->out_len ? POLLOUT : 0);
            who[n].port = i; who[n].chan = -1; n++;
            if (!p->synced) continue;
            for (int j = 0; j < MAX_CHANNELS; j++) {
                struct channel *c = &p->ch[j];
                if (!c->used) continue;
                int can_send = c->credit > 0 && data_room(p, 1);
                if (c->connecting) { fds[n].fd = c->in_fd; fds[n].events = POLLOUT; who[n].port = i; who[n].chan = j; who[n].role = 0; n++; continue; }
                short in_ev = (c->in_len || c->in_eof_asked == 1) ? POLLOUT : 0;
                short out_ev = (!c->out_done && can_send) ? POLLIN : 0;
                if (c->in_fd >= 0 && c->in_fd == c->out_fd) {
                    if (in_ev | out_ev) { fds[n].fd = c->in_fd; fds[n].events = in_ev | out_ev; who[n].port = i; who[n].chan = j; who[n].role = 0; n++; }
                } else {
                    if (c->in_fd >= 0 && in_ev) { fds[n].fd = c->in_fd; fds[n].events = in_ev; who[n].port = i; who[n].chan = j; who[n].role = 0; n++; }
                    if (out_ev) { fds[n].fd = c->out_fd; fds[n].events = out_ev; who[n].port = i; who[n].chan = j; who[n].role = 1; n++; }
                    if (!c->err_done && can_send) { fds[n].fd = c->err_fd; fds[n].events = POLLIN; who[n].port = i; who[n].chan = j; who[n].role = 2; n++; }
                }
                if (c->in_eof_asked == 1 && !c->in_len) waiting = 1;
                if (c->exited) waiting = 1;
            }
        }
        int r = poll(fds, n, waiting ? 50 : 1000);
        if (r < 0 && errno != EINTR) return 1;
        for (int k = 0; k < n && r > 0; k++) {
            if (!fds[k].revents) continue;
            if (who[k].port < 0) { reap(); continue; }
            struct port *p = &ports[who[k].port];
            if (who[k].chan < 0) {
                if (fds[k].revents & POLLHUP) {  /* the host is gone: its channels end */
                    if (p->connected) reset(p);
                    p->connected = 0; p->in_len = 0;
                    clock_gettime(CLOCK_MONOTONIC, &p->checked);
                    continue;
                }
                p->connected = 1;
                if (fds[k].revents & POLLIN) read_port(p);
                if ((fds[k].revents & POLLOUT) && p->out_len) {
                    ssize_t w = write(p->fd, p->out, p->out_len);
                    if (w > 0) { memmove(p->out, p->out + w, p->out_len - w); p->out_len -= (size_t)w; }
                }
                continue;
            }
            struct channel *c = &p->ch[who[k].chan];
            if (!c->used || !p->synced) continue;
            if (c->connecting) {
                int e = 0; socklen_t l = sizeof e;
                getsockopt(c->in_fd, SOL_SOCKET, SO_ERROR, &e, &l);
                if (e) { failed(p, c->id, "connect", e); release(c); continue; }
                c->connecting = 0; frame(p, G_OPENED, c->id, NULL, 0);
                continue;
            }
            if (who[k].role == 0 && (fds[k].revents & (POLLOUT | POLLERR | POLLHUP)) && (c->in_len || c->in_eof_asked == 1)) pump_in(p, c);
            if (who[k].role == 0 && c->used && c->in_fd == c->out_fd && (fds[k].revents & (POLLIN | POLLHUP | POLLERR))) pump_out(p, c, c->out_fd, G_OUT, &c->out_done);
            if (who[k].role == 1) pump_out(p, c, c->out_fd, G_OUT, &c->out_done);
            if (who[k].role == 2) pump_out(p, c, c->err_fd, G_ERR, &c->err_done);
        }
        for (int i = 0; i < nports; i++) {
            struct port *p = &ports[i];
            if (!p->synced) continue;
            for (int j = 0; j < MAX_CHANNELS; j++) {
                struct channel *c = &p->ch[j];
                if (!c->used) continue;
                if (c->in_eof_asked == 1 && !c->in_len) pump_in(p, c);
                finish(p, c);
            }
            if (p->out_len && p->connected) {  /* written at once when the port takes it */
                ssize_t w = write(p->fd, p->out, p->out_len);
                if (w > 0) { memmove(p->out, p->out + w, p->out_len - w); p->out_len -= (size_t)w; }
            }
        }
    }
}
