/*
 * libferrite from C: connect, create a pool, put, get, erase, find, and clean up.
 *
 *   cc basic.c $(pkg-config --cflags --libs ferrite) -o basic && ./basic 127.0.0.1:11911
 *
 * The server address comes from the first argument, else FERRITE_ADDR, else 127.0.0.1:11911.
 * Every out-parameter starts empty and every object is released at `done`, whether or not the
 * program got that far: the free and close functions accept NULL and empty values.
 */

#include <ferrite.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT(s) (const uint8_t *)(s), strlen(s)

static int report(const char *what, ferrite_status status) {
    fprintf(stderr, "%s failed: %s (%d): %s\n", what, ferrite_status_name(status), (int)status,
            ferrite_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *address = argc > 1 ? argv[1] : getenv("FERRITE_ADDR");
    if (address == NULL) address = "127.0.0.1:11911";
    const char *pool_name = "example-c";

    ferrite_session *session = NULL;
    ferrite_pool *pool = NULL;
    ferrite_buffer value = {0};
    ferrite_key_list keys = {0};
    ferrite_status status;
    int failed = 1;

    ferrite_options options = FERRITE_OPTIONS_INIT;
    options.client_name = "examples/c/basic.c";
    if ((status = ferrite_connect(address, &options, &session)) != FERRITE_OK) {
        report("connect", status);
        goto done;
    }
    printf("connected to %s with libferrite %s\n", address, ferrite_version());

    /* Creates the pool, or opens it if a previous run left it behind. */
    status = ferrite_pool_create(session, pool_name, FERRITE_POOL_SIZE_DEFAULT, 1000, 0, NULL, &pool);
    if (status != FERRITE_OK) {
        report("create pool", status);
        goto done;
    }

    const char *pairs[][2] = {
        {"greeting", "hello, world"},
        {"fruit:apple", "red"},
        {"fruit:banana", "yellow"},
        {"fruit:cherry", "dark red"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        if ((status = ferrite_put(pool, TEXT(pairs[i][0]), TEXT(pairs[i][1]), 0)) != FERRITE_OK) {
            report("put", status);
            goto done;
        }
    }

    if ((status = ferrite_get(pool, TEXT("greeting"), &value)) != FERRITE_OK) {
        report("get", status);
        goto done;
    }
    printf("greeting = %.*s\n", (int)value.len, (const char *)value.data);
    ferrite_buffer_free(&value);

    /* The caller's own buffer: no allocation, and the needed size if it is too small. */
    char small[4];
    size_t len = 0;
    status = ferrite_get_into(pool, TEXT("fruit:cherry"), (uint8_t *)small, sizeof small, &len);
    if (status == FERRITE_ERR_BUFFER_TOO_SMALL) {
        printf("fruit:cherry needs %zu bytes, more than %zu\n", len, sizeof small);
    }

    if ((status = ferrite_erase(pool, TEXT("greeting"))) != FERRITE_OK) {
        report("erase", status);
        goto done;
    }
    status = ferrite_get(pool, TEXT("greeting"), &value);
    printf("after erase, get greeting: %s (status %d)\n", ferrite_status_name(status), (int)status);

    if ((status = ferrite_find(pool, FERRITE_FIND_PREFIX, TEXT("fruit:"), &keys)) != FERRITE_OK) {
        report("find", status);
        goto done;
    }
    printf("%zu keys start with \"fruit:\":\n", keys.len);
    for (size_t i = 0; i < keys.len; i++) {
        printf("  %.*s\n", (int)keys.keys[i].len, (const char *)keys.keys[i].data);
    }

    uint64_t count = 0;
    if ((status = ferrite_count(pool, &count)) != FERRITE_OK) {
        report("count", status);
        goto done;
    }
    printf("the pool holds %llu pairs\n", (unsigned long long)count);
    failed = 0;

done:
    ferrite_key_list_free(&keys);
    ferrite_buffer_free(&value);
    ferrite_pool_close(pool);
    if (session != NULL && pool != NULL) {
        /* Only once every open of the pool is closed may it be deleted. */
        if ((status = ferrite_pool_delete(session, pool_name)) != FERRITE_OK) {
            failed = report("delete pool", status);
        }
    }
    ferrite_session_close(session);
    return failed;
}
