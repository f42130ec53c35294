// LD_PRELOAD shim for wrk: records runs of consecutive read() calls on one fd, and each fd's
// local port (to find it in `ss`). SHIM_OUT=file names where the runs go at exit.
// Build: gcc -O2 -shared -fPIC -o /tmp/wrkshim/shim.so shim.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
static int port_of[4096];
typedef ssize_t (*read_t)(int, void *, size_t);
static read_t real_read;
struct run { int fd; uint64_t t0, t1, bytes, reads; };
#define MAXR (1 << 22)
static struct run runs[MAXR];
static long nr = -1;
static uint64_t now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
ssize_t read(int fd, void *buf, size_t n) {
    if (!real_read) real_read = (read_t)dlsym(RTLD_NEXT, "read");
    ssize_t r = real_read(fd, buf, n);
    if (fd < 3 || r <= 0) return r;
    uint64_t t = now();
    if (fd < 4096 && !port_of[fd]) {
        struct sockaddr_in a; socklen_t l = sizeof a;
        if (getsockname(fd, (struct sockaddr *)&a, &l) == 0) port_of[fd] = ntohs(a.sin_port);
    }
    if (nr < 0 || runs[nr].fd != fd) { if (nr + 1 >= MAXR) return r; nr++; runs[nr].fd = fd; runs[nr].t0 = t; runs[nr].bytes = 0; runs[nr].reads = 0; }
    runs[nr].t1 = t; runs[nr].bytes += r; runs[nr].reads++;
    return r;
}
__attribute__((destructor)) static void dump(void) {
    const char *p = getenv("SHIM_OUT"); if (!p) return;
    FILE *f = fopen(p, "w"); if (!f) return;
    for (int i = 0; i < 4096; i++) if (port_of[i]) fprintf(f, "# fd %d port %d\n", i, port_of[i]);
    for (long i = 0; i <= nr; i++) fprintf(f, "%d %lu %lu %lu %lu\n", runs[i].fd, runs[i].t0, runs[i].t1, runs[i].bytes, runs[i].reads);
    fclose(f);
}
