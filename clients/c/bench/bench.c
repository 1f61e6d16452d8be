/* Small-operation throughput of libferrite: 16-byte puts, then gets, over a key space of 10,000
 * keys in a pool whose writes are acknowledged once applied (`FERRITE_POOL_ASYNC`, like Redis
 * without persistence), either one blocking call at a time or with a number of asynchronous
 * calls in flight on one session. Prints one JSON line. Built and run by bench/clients.py, which
 * puts the figures next to the Rust and Python clients' and redis-py's in the same run
 * (docs/benchmarks.md).
 *
 *   bench ADDRESS SECONDS blocking
 *   bench ADDRESS SECONDS async IN_FLIGHT
 */
#include <ferrite.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEYS 10000
#define VALUE_BYTES 16

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, ferrite_status status) {
    fprintf(stderr, "bench: %s: %s: %s\n", what, ferrite_status_name(status), ferrite_last_error());
    return 1;
}

static size_t key_of(unsigned long index, char *key) {
    return (size_t)snprintf(key, 32, "key:%08lu", index % KEYS);
}

/* Submits one put or get of the key numbered `index`. */
static ferrite_status submit(ferrite_pool *pool, bool put, unsigned long index, ferrite_op **op) {
    static const uint8_t value[VALUE_BYTES] = "vvvvvvvvvvvvvvv";
    char key[32];
    size_t key_len = key_of(index, key);
    return put ? ferrite_put_async(pool, (const uint8_t *)key, key_len, value, sizeof value, 0, op)
               : ferrite_get_async(pool, (const uint8_t *)key, key_len, op);
}

/* Puts or gets for `seconds`, one blocking call at a time (in_flight 0) or with `in_flight`
 * asynchronous calls outstanding; ops/s, or -1 after reporting a failure. */
static double timed(ferrite_pool *pool, double seconds, int in_flight, bool put) {
    static const uint8_t value[VALUE_BYTES] = "vvvvvvvvvvvvvvv";
    const char *what = put ? "put" : "get";
    ferrite_status status;
    char key[32];
    unsigned long ops = 0;
    double start = now_seconds(), end = start + seconds;
    if (in_flight == 0) {
        uint8_t out[VALUE_BYTES];
        size_t len = 0;
        while (now_seconds() < end) {
            for (int batch = 0; batch < 256; batch++, ops++) {
                size_t key_len = key_of(ops * 7919, key);
                status = put ? ferrite_put(pool, (const uint8_t *)key, key_len, value, sizeof value, 0)
                             : ferrite_get_into(pool, (const uint8_t *)key, key_len, out, sizeof out, &len);
                if (status != FERRITE_OK)
                    return fail(what, status), -1;
            }
        }
        return (double)ops / (now_seconds() - start);
    }
    ferrite_op **ring = calloc((size_t)in_flight, sizeof *ring);
    unsigned long submitted = 0;
    for (; submitted < (unsigned long)in_flight; submitted++) {
        status = submit(pool, put, submitted * 7919, &ring[submitted]);
        if (status != FERRITE_OK)
            return fail(what, status), -1;
    }
    while (ops < submitted) {
        ferrite_op **slot = &ring[ops % (unsigned long)in_flight];
        status = ferrite_op_wait(*slot, FERRITE_WAIT_FOREVER);
        ferrite_op_free(*slot);
        *slot = NULL;
        if (status != FERRITE_OK)
            return fail(what, status), -1;
        ops++;
        if (now_seconds() < end) {
            status = submit(pool, put, submitted * 7919, slot);
            if (status != FERRITE_OK)
                return fail(what, status), -1;
            submitted++;
        }
    }
    free(ring);
    return (double)ops / (now_seconds() - start);
}

int main(int argc, char **argv) {
    if (argc < 4 || (strcmp(argv[3], "async") == 0 && argc < 5)) {
        fprintf(stderr, "usage: %s ADDRESS SECONDS blocking | ADDRESS SECONDS async IN_FLIGHT\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[2]);
    int in_flight = strcmp(argv[3], "async") == 0 ? atoi(argv[4]) : 0;
    ferrite_session *session = NULL;
    ferrite_pool *pool = NULL;
    ferrite_status status = ferrite_connect(argv[1], NULL, &session);
    if (status != FERRITE_OK)
        return fail("connect", status);
    status = ferrite_pool_create(session, "bench-c", FERRITE_POOL_SIZE_DEFAULT, KEYS, FERRITE_POOL_ASYNC, NULL, &pool);
    if (status != FERRITE_OK)
        return fail("create the pool", status);
    static const uint8_t value[VALUE_BYTES] = "vvvvvvvvvvvvvvv";
    char key[32];
    for (unsigned long i = 0; i < KEYS; i++) {
        status = ferrite_put(pool, (const uint8_t *)key, key_of(i, key), value, sizeof value, 0);
        if (status != FERRITE_OK)
            return fail("preload", status);
    }
    double puts = timed(pool, seconds, in_flight, true);
    double gets = puts < 0 ? -1 : timed(pool, seconds, in_flight, false);
    if (gets < 0)
        return 1;
    printf("{\"client\": \"c\", \"mode\": \"%s\", \"in_flight\": %d, \"put_ops_per_s\": %.0f, "
           "\"get_ops_per_s\": %.0f}\n",
           argv[3], in_flight > 0 ? in_flight : 1, puts, gets);
    ferrite_pool_close(pool);
    ferrite_pool_delete(session, "bench-c");
    ferrite_session_close(session);
    return 0;
}
