/*
 * A test plugin for the ferrite-ado host, built by the tests from ferrite_plugin.h with the
 * system C compiler. The payload picks what do_work does; the config bytes are the layer's
 * name, echoed in responses so a chain's order is visible.
 */
#include <ferrite_plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct state {
    char name[32];
} state;

static int is(const ferrite_work *work, const char *word) {
    size_t len = strlen(word);
    return work->payload.len == len && memcmp(work->payload.data, word, len) == 0;
}

static void *launch(const ferrite_callbacks *cb, ferrite_host *host, ferrite_bytes config, int *status) {
    state *s = calloc(1, sizeof(state));
    if (s == NULL) {
        *status = FERRITE_ERR_NO_SPACE;
        return NULL;
    }
    size_t len = config.len < sizeof(s->name) - 1 ? config.len : sizeof(s->name) - 1;
    memcpy(s->name, config.data, len);
    cb->log(host, FERRITE_LOG_INFO, "launched", 8);
    *status = FERRITE_OK;
    return s;
}

static int respond_text(const ferrite_callbacks *cb, ferrite_host *host, const char *text) {
    return cb->respond(host, (const uint8_t *)text, strlen(text));
}

/* Declares the 8-byte target value and adds one to it. */
static int increment(const ferrite_work *work, const ferrite_callbacks *cb, ferrite_host *host) {
    if (work->value_len != 8) return FERRITE_ERR_INVALID;
    int rc = cb->declare_write(host, work->value, 8);
    if (rc != FERRITE_OK) return rc;
    uint64_t v;
    memcpy(&v, work->value, 8);
    v += 1;
    memcpy(work->value, &v, 8);
    return FERRITE_OK;
}

static int do_work(void *opaque, const ferrite_work *work, const ferrite_callbacks *cb, ferrite_host *host) {
    state *s = opaque;
    char text[128];
    if (is(work, "name")) {
        return respond_text(cb, host, s->name);
    }
    if (is(work, "inc")) {
        return increment(work, cb, host);
    }
    if (is(work, "inc-fail")) {
        int rc = increment(work, cb, host);
        respond_text(cb, host, "failing");
        return rc == FERRITE_OK ? FERRITE_ERR_FAILED : rc;
    }
    if (is(work, "inc-abort")) {
        increment(work, cb, host);
        abort();
    }
    if (is(work, "inc-segv")) {
        increment(work, cb, host);
        /* A real fault, not raise(): a synthetic signal would return from the host's handler. */
        int *volatile nowhere = NULL;
        *(volatile int *)nowhere = 1;
        return FERRITE_OK;
    }
    if (is(work, "stray")) {
        /* The page before the call's own: pool memory the call was not given. */
        volatile uint8_t *elsewhere = work->value - 4096;
        *elsewhere = 1;
        return FERRITE_OK;
    }
    if (is(work, "loop")) {
        for (volatile int spin = 0;; spin++) {
        }
    }
    if (is(work, "oom")) {
        for (;;) {
            char *p = malloc(1 << 20);
            memset(p, 1, 1 << 20);
        }
    }
    if (is(work, "undeclared")) {
        work->value[0] ^= 0xff;
        return FERRITE_OK;
    }
    if (is(work, "outside")) {
        int beyond = cb->declare_write(host, work->value + work->value_len, 8);
        snprintf(text, sizeof text, "%d", beyond);
        return respond_text(cb, host, text);
    }
    if (is(work, "too-big")) {
        return cb->declare_write(host, work->value, work->value_len);
    }
    if (is(work, "create")) {
        ferrite_pair pair;
        int rc = cb->create_key(host, (const uint8_t *)"fresh", 5, 16, &pair);
        if (rc != FERRITE_OK) return rc;
        rc = cb->declare_write(host, pair.value, pair.value_len);
        if (rc != FERRITE_OK) return rc;
        memset(pair.value, 'x', pair.value_len);
        ferrite_pool_info info;
        rc = cb->pool_info(host, &info);
        if (rc != FERRITE_OK) return rc;
        snprintf(text, sizeof text, "%.*s@%llu objects=%llu", (int)pair.key.len, (const char *)pair.key.data,
                 (unsigned long long)pair.value_offset, (unsigned long long)info.objects);
        return respond_text(cb, host, text);
    }
    if (is(work, "missing")) {
        ferrite_pair pair;
        int rc = cb->open_key(host, (const uint8_t *)"nope", 4, 0, &pair);
        snprintf(text, sizeof text, "%d", rc);
        return respond_text(cb, host, text);
    }
    return FERRITE_ERR_INVALID;
}

static void shutdown_plugin(void *opaque) {
    free(opaque);
}

static const ferrite_plugin_v1 table = {
    .abi_version = FERRITE_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ferrite_plugin_v1),
    .name = "behaviours",
    .launch = launch,
    .do_work = do_work,
    .pool_event = NULL,
    .shutdown = shutdown_plugin,
};

const ferrite_plugin_v1 *ferrite_plugin_entry(void) {
    return &table;
}
