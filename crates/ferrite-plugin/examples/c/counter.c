/*
 * counter.c: a Ferrite plugin written in C against ferrite_plugin.h.
 *
 * The value is a 64-bit signed integer, 8 bytes (native-endian here; the host and the plugin
 * share a machine). Payloads: "get" answers the value as decimal text; "add N" adds N, declaring
 * the value before writing it, and answers the sum. Anything else is FERRITE_ERR_INVALID.
 *
 * Build: cc -shared -fPIC -I crates/ferrite-plugin/include -o libcounter_c.so counter.c
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferrite_plugin.h"

static void *counter_launch(const ferrite_callbacks *callbacks, ferrite_host *host, ferrite_bytes config,
                            int *status) {
    (void)callbacks;
    (void)host;
    (void)config;
    *status = FERRITE_OK;
    return NULL; /* no state */
}

static int fail(const ferrite_callbacks *callbacks, ferrite_host *host, const char *message) {
    callbacks->respond(host, (const uint8_t *)message, strlen(message));
    return FERRITE_ERR_INVALID;
}

static int counter_do_work(void *state, const ferrite_work *work, const ferrite_callbacks *callbacks,
                           ferrite_host *host) {
    (void)state;
    char request[64];
    if (work->value_len != sizeof(int64_t)) {
        return fail(callbacks, host, "counter.c: the value is not 8 bytes");
    }
    if (work->payload.len >= sizeof request) {
        return fail(callbacks, host, "counter.c: payload too long");
    }
    memcpy(request, work->payload.data, work->payload.len);
    request[work->payload.len] = '\0';

    int64_t value;
    memcpy(&value, work->value, sizeof value);
    if (strncmp(request, "add ", 4) == 0) {
        char *end;
        errno = 0;
        long long delta = strtoll(request + 4, &end, 10);
        if (errno != 0 || end == request + 4 || *end != '\0') {
            return fail(callbacks, host, "counter.c: expected add N");
        }
        if ((delta > 0 && value > INT64_MAX - delta) || (delta < 0 && value < INT64_MIN - delta)) {
            return fail(callbacks, host, "counter.c: overflow");
        }
        value += delta;
        /* Declare before writing, so the host can undo the write if the call fails. */
        int status = callbacks->declare_write(host, work->value, sizeof value);
        if (status != FERRITE_OK) {
            return status;
        }
        memcpy(work->value, &value, sizeof value);
    } else if (strcmp(request, "get") != 0) {
        return fail(callbacks, host, "counter.c: expected add N or get");
    }

    char answer[32];
    int len = snprintf(answer, sizeof answer, "%lld", (long long)value);
    return callbacks->respond(host, (const uint8_t *)answer, (size_t)len);
}

static const ferrite_plugin_v1 counter_table = {
    .abi_version = FERRITE_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ferrite_plugin_v1),
    .name = "counter-c",
    .launch = counter_launch,
    .do_work = counter_do_work,
    .pool_event = NULL,
    .shutdown = NULL,
};

const ferrite_plugin_v1 *ferrite_plugin_entry(void) {
    return &counter_table;
}
