/*
 * A tiny sender/receiver to show libdrs.
 *   drs_xfer recv PORT
 *   drs_xfer send HOST PORT MEGABYTES [--drs]
 * The sender prints its throughput and, with --drs, what libdrs measured.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "drs.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int recv_main(int port) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1)) { perror("listen"); return 1; }
    int c = accept(l, NULL, NULL);
    if (c < 0) { perror("accept"); return 1; }
    static char buf[1 << 20];
    long long total = 0;
    ssize_t n;
    while ((n = read(c, buf, sizeof buf)) > 0) total += n;
    printf("received %lld bytes\n", total);
    close(c);
    close(l);
    return 0;
}

static int send_main(const char *host, int port, long mb, int use_drs) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a)) { perror("connect"); return 1; }
    drs_t *d = NULL;
    if (use_drs) {
        d = drs_attach(s);
        if (!d || drs_start(d, 100) != 0) { fprintf(stderr, "drs_attach failed\n"); return 1; }
    }
    static char buf[1 << 20];
    memset(buf, 'x', sizeof buf);
    double t0 = now();
    for (long i = 0; i < mb; i++) {
        size_t off = 0;
        while (off < sizeof buf) {
            ssize_t n = write(s, buf + off, sizeof buf - off);
            if (n < 0) { perror("write"); return 1; }
            off += n;
        }
    }
    shutdown(s, SHUT_WR);
    char tmp;
    while (read(s, &tmp, 1) > 0) {}
    double secs = now() - t0;
    printf("sent %ld MiB in %.3f s: %.1f Mbit/s%s\n", mb, secs, mb * 8.388608 / secs, use_drs ? " (with libdrs)" : "");
    if (d) {
        drs_estimate_t e;
        drs_tune(d);
        if (drs_estimate(d, &e) == 0)
            printf("libdrs: min rtt %.3f ms, delivery rate %.1f Mbit/s, send buffer %llu bytes, "
                   "limit %d, %u adjustments\n",
                   e.min_rtt_ms, e.delivery_rate_bps / 1e6, (unsigned long long)e.sndbuf_bytes, e.limit,
                   e.adjustments);
        drs_detach(d);
    }
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "recv")) return recv_main(atoi(argv[2]));
    if (argc >= 5 && !strcmp(argv[1], "send"))
        return send_main(argv[2], atoi(argv[3]), atol(argv[4]), argc >= 6 && !strcmp(argv[5], "--drs"));
    fprintf(stderr, "usage: drs_xfer recv PORT | drs_xfer send HOST PORT MEGABYTES [--drs]\n");
    return 2;
}
