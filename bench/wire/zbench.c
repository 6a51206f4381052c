/* An independent ZPER client in C on the system's libzmq (issue #17's benchmark): the same
 * client for zper, for the original ZPER when one is given, and for raw libzmq PUSH/PULL.
 * It knows only the ZPER wire protocol (spec zper.md §3 identity, §4 writer, §5 reader).
 *
 *   zbench produce ENDPOINT READER TOPIC COUNT SIZE [ID [TOTAL]]
 *       A DEALER with a mode-0 identity for TOPIC (uuid from ID) sends COUNT messages of SIZE
 *       bytes, then asks READER (OFFSET -1) until the end it reports covers COUNT messages
 *       more than at its start, or, with TOTAL, TOTAL messages from offset 0 (a fresh topic).
 *       Prints "produce <count> <seconds from the first send to that end> <its CPU seconds,
 *       user + system, all its threads>": zper's flushed end, the original's written end (which
 *       favours the original). Several producers on one
 *       fresh topic each pass the sum as TOTAL; the slowest one's time is the run's.
 *       Env MODE (0): the identity's ack mode (§4.5); with 1-127 the acks that arrive are read
 *       (without waiting) after every 1024th send and at the end, so they never back up, and
 *       their count is printed as a fifth field. Not after every send: libzmq's non-blocking
 *       recv polls its command pipe with a system call each time, which made the client the
 *       bottleneck (measured: 1M messages in 2.9 s, against 0.45 s reading every 1024th).
 *   zbench push ENDPOINT COUNT SIZE        A PUSH sends COUNT messages of SIZE bytes.
 *   zbench sink BIND COUNT                 A PULL receives COUNT messages; prints
 *       "sink <count> <seconds from the first to the last> <its CPU seconds, user + system>".
 *   zbench consume READER TOPIC MAX_BYTES  FETCHes from 0 to the flushed end, MAX_BYTES per
 *       request; prints "consume <messages> <bytes> <seconds>".
 *
 * Build: cc -O2 -o zbench zbench.c -lzmq   (Debian: libzmq3-dev)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* This process's CPU time so far, user + system, all its threads (libzmq's I/O thread too). */
static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void die(const char *what) {
    fprintf(stderr, "zbench: %s: %s\n", what, zmq_strerror(zmq_errno()));
    exit(1);
}

/* §3: [hash:1][mode:1][tlen:1][topic][uuid:16]; hash = low byte of Java String.hashCode. */
static size_t identity(const char *topic, int mode, unsigned id, unsigned char *out) {
    int32_t h = 0;
    size_t n = strlen(topic);
    for (size_t i = 0; i < n; i++) h = 31 * h + (unsigned char)topic[i];
    out[0] = (unsigned char)(h & 0xff);
    out[1] = (unsigned char)mode;
    out[2] = (unsigned char)n;
    memcpy(out + 3, topic, n);
    memset(out + 3 + n, 0, 16);
    for (int i = 0; i < 4; i++) out[3 + n + 12 + i] = (unsigned char)(id >> (24 - 8 * i));
    return 3 + n + 16;
}

static void be64(int64_t v, unsigned char *out) {
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)v >> (56 - 8 * i));
}

static uint64_t rd64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

/* One request of frames to a reader DEALER; the reply's frames go to out[] (at most max). */
static int ask(void *s, const void *const *frames, const size_t *lens, int n, zmq_msg_t *out,
               int max) {
    for (int i = 0; i < n; i++)
        if (zmq_send(s, frames[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0) < 0) die("send");
    int got = 0;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) die("recv");
        int more = zmq_msg_more(&m);
        if (got < max) out[got++] = m; else zmq_msg_close(&m);
        if (!more) return got;
    }
}

/* A reader DEALER; `who` makes its identity unique (the reader hands an identity over to its
 * newest connection, so two readers sharing one would lose replies). */
static void *reader(void *ctx, const char *endpoint, const char *topic, unsigned who) {
    unsigned char id[128];
    size_t idlen = identity(topic, 0, 0x80000000u | who, id);
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_IDENTITY, id, idlen);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(s, endpoint) < 0) die("connect reader");
    return s;
}

/* §5.4: OFFSET -1 -> [100][start of newest segment][end]: zper's flushed end, the original's
 * written end (it has no flushed end to report, and flushes its tail only on a later append). */
static uint64_t flushed_end(void *r) {
    unsigned char arg[8];
    be64(-1, arg);
    const void *f[2] = {"OFFSET", arg};
    size_t l[2] = {6, 8};
    zmq_msg_t out[4];
    int n = ask(r, f, l, 2, out, 4);
    uint64_t end = 0;
    if (n == 3 && zmq_msg_size(&out[2]) == 8) end = rd64(zmq_msg_data(&out[2]));
    for (int i = 0; i < n; i++) zmq_msg_close(&out[i]);
    return end;
}

static int produce(int argc, char **argv) {
    if (argc < 7) return 2;
    const char *endpoint = argv[2], *rendpoint = argv[3], *topic = argv[4];
    long count = atol(argv[5]), size = atol(argv[6]);
    unsigned who = argc > 7 ? (unsigned)atol(argv[7]) : 1;
    long total = argc > 8 ? atol(argv[8]) : count;
    void *ctx = zmq_ctx_new();
    void *r = reader(ctx, rendpoint, topic, who);
    uint64_t base = flushed_end(r);
    const char *m = getenv("MODE");
    int mode = m ? atoi(m) : 0;
    unsigned char id[128];
    size_t idlen = identity(topic, mode, who, id);
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_IDENTITY, id, idlen);
    int hwm = 100000;
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (zmq_connect(s, endpoint) < 0) die("connect writer");
    char *body = malloc(size);
    memset(body, 'x', size);
    usleep(200000); /* the connection is up before the clock starts */
    /* Several producers on one fresh topic: TOTAL counts from offset 0, since a producer
     * that starts late would read a base that already holds the others' messages. */
    if (argc > 8) base = 0;
    uint64_t want = base + (uint64_t)total * (size + (size > 255 ? 9 : 2));
    long acks = 0;
    char ack[256];
    double t0 = now();
    for (long i = 0; i < count; i++) {
        if (zmq_send(s, body, size, 0) < 0) die("send");
        if (mode > 0 && (i & 1023) == 0)
            while (zmq_recv(s, ack, sizeof ack, ZMQ_DONTWAIT) >= 0) acks++;
    }
    while (flushed_end(r) < want) {
        if (mode > 0)
            while (zmq_recv(s, ack, sizeof ack, ZMQ_DONTWAIT) >= 0) acks++;
        usleep(500);
    }
    printf("produce %ld %.6f %.6f %ld\n", count, now() - t0, cpu_seconds(), acks);
    zmq_close(s);
    zmq_close(r);
    zmq_ctx_term(ctx);
    return 0;
}

static int push(int argc, char **argv) {
    if (argc < 5) return 2;
    long count = atol(argv[3]), size = atol(argv[4]);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_PUSH);
    int hwm = 100000;
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (zmq_connect(s, argv[2]) < 0) die("connect");
    char *body = malloc(size);
    memset(body, 'x', size);
    usleep(200000);
    for (long i = 0; i < count; i++)
        if (zmq_send(s, body, size, 0) < 0) die("send");
    zmq_close(s); /* linger: everything is delivered before the context ends */
    zmq_ctx_term(ctx);
    return 0;
}

static int sink(int argc, char **argv) {
    if (argc < 4) return 2;
    long count = atol(argv[3]);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_PULL);
    int hwm = 100000;
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (zmq_bind(s, argv[2]) < 0) die("bind");
    zmq_msg_t m;
    zmq_msg_init(&m);
    double t0 = 0;
    for (long i = 0; i < count; i++) {
        if (zmq_msg_recv(&m, s, 0) < 0) die("recv");
        if (i == 0) t0 = now();
    }
    printf("sink %ld %.6f %.6f\n", count, now() - t0, cpu_seconds());
    zmq_msg_close(&m);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return 0;
}

/* §5.3: FETCH offset max_bytes -> [100][raw stored records]; counts whole messages. */
static int consume(int argc, char **argv) {
    if (argc < 5) return 2;
    long max = atol(argv[4]);
    void *ctx = zmq_ctx_new();
    void *r = reader(ctx, argv[2], argv[3], 0);
    uint64_t end = flushed_end(r), at = 0, messages = 0;
    unsigned char off[8], mb[8];
    double t0 = now();
    while (at < end) {
        be64((int64_t)at, off);
        be64(max, mb);
        const void *f[3] = {"FETCH", off, mb};
        size_t l[3] = {5, 8, 8};
        zmq_msg_t out[2];
        int n = ask(r, f, l, 3, out, 2);
        if (n != 2 || ((unsigned char *)zmq_msg_data(&out[0]))[0] != 100) {
            fprintf(stderr, "zbench: FETCH at %llu failed\n", (unsigned long long)at);
            return 1;
        }
        const unsigned char *p = zmq_msg_data(&out[1]);
        size_t len = zmq_msg_size(&out[1]), i = 0;
        if (len == 0) { /* the flushed end: the original's OFFSET -1 gives the written end */
            zmq_msg_close(&out[0]);
            zmq_msg_close(&out[1]);
            break;
        }
        while (i + 2 <= len) { /* §6.2: [flags][len:1|8][payload] */
            uint64_t body;
            size_t head;
            if (p[i] & 2) {
                if (i + 9 > len) break;
                body = rd64(p + i + 1);
                head = 9;
            } else {
                body = p[i + 1];
                head = 2;
            }
            if (i + head + body > len) break;
            if (!(p[i] & 1)) messages++;
            i += head + body;
        }
        if (i == 0) {
            fprintf(stderr, "zbench: no whole record at %llu\n", (unsigned long long)at);
            return 1;
        }
        at += i;
        zmq_msg_close(&out[0]);
        zmq_msg_close(&out[1]);
    }
    printf("consume %llu %llu %.6f\n", (unsigned long long)messages, (unsigned long long)at,
           now() - t0);
    zmq_close(r);
    zmq_ctx_term(ctx);
    return 0;
}

int main(int argc, char **argv) {
    int rc = 2;
    if (argc > 1 && !strcmp(argv[1], "produce")) rc = produce(argc, argv);
    else if (argc > 1 && !strcmp(argv[1], "push")) rc = push(argc, argv);
    else if (argc > 1 && !strcmp(argv[1], "sink")) rc = sink(argc, argv);
    else if (argc > 1 && !strcmp(argv[1], "consume")) rc = consume(argc, argv);
    if (rc == 2)
        fprintf(stderr, "usage: zbench produce ENDPOINT READER TOPIC COUNT SIZE [ID [TOTAL]] | push "
                        "ENDPOINT COUNT SIZE | sink BIND COUNT | consume READER TOPIC MAX_BYTES\n");
    return rc;
}
