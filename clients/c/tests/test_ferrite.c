/*
 * The C test of libferrite, against a real server: every call, its errors, and that what the
 * library allocates is freed (run under AddressSanitizer or valgrind by run.sh to prove it).
 *
 * Environment:
 *   FERRITE_TEST_ADDR      a plain server's native address (host:port); required.
 *   FERRITE_TEST_TLS_ADDR  a server with mutual TLS and users; the secure tests skip without it.
 *   FERRITE_TEST_CA, FERRITE_TEST_CLIENT_CERT, FERRITE_TEST_CLIENT_KEY
 *                          PEM files for the TLS server: its CA, a client certificate and key.
 *   FERRITE_TEST_USER, FERRITE_TEST_PASSWORD
 *                          a user of the TLS server, granted everything on pools named "secure*".
 *   FERRITE_TEST_DIRECT_MAX
 *                          the plain server's limits.direct_value_bytes_max, if set low enough to
 *                          test a put past it; that check skips without it.
 *   FERRITE_TEST_CLUSTER_ADDRS
 *                          the native addresses of a three-node cluster's nodes, separated by
 *                          commas; the cluster test skips without it.
 *
 * Prints each test and ends with "N passed, N failed"; exits 1 if any failed.
 */

#include "ferrite.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stddef.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the runner */

static int check_failures; /* failed checks in the running test */
static int skipped;        /* set by a test that could not run */

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "    %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);           \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* `expr` returns `expected`; any status but OK and PENDING must leave a message. */
#define CHECK_STATUS(expr, expected)                                                               \
    do {                                                                                           \
        ferrite_status got_ = (expr);                                                              \
        ferrite_status want_ = (expected);                                                         \
        if (got_ != want_) {                                                                       \
            fprintf(stderr, "    %s:%d: %s\n      returned %s (%d), expected %s (%d); last error: %s\n", \
                    __FILE__, __LINE__, #expr, ferrite_status_name(got_), (int)got_,               \
                    ferrite_status_name(want_), (int)want_, ferrite_last_error());                 \
            check_failures++;                                                                      \
        } else if (got_ != FERRITE_OK && got_ != FERRITE_PENDING &&                                \
                   ferrite_last_error()[0] == '\0') {                                              \
            fprintf(stderr, "    %s:%d: %s failed without a message\n", __FILE__, __LINE__, #expr); \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, FERRITE_OK)

/* Stops the running test: later steps would only fail for the same reason. */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "    %s:%d: requirement failed: %s (last error: %s)\n", __FILE__,      \
                    __LINE__, #cond, ferrite_last_error());                                        \
            check_failures++;                                                                      \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static const char *addr;

/* Pool names are unique per process so that the test can run twice against one server. */
static void pool_name(char *out, size_t cap, const char *what) {
    snprintf(out, cap, "c-%ld-%s", (long)getpid(), what);
}

static ferrite_session *connect_plain(void) {
    ferrite_session *session = NULL;
    ferrite_status status = ferrite_connect(addr, NULL, &session);
    if (status != FERRITE_OK) {
        fprintf(stderr, "    connect to %s: %s: %s\n", addr, ferrite_status_name(status),
                ferrite_last_error());
    }
    return session;
}

/* A new pool (create-only, so a leftover from an earlier run is an error, not a surprise). */
static ferrite_pool *new_pool(ferrite_session *session, const char *what, uint32_t flags,
                              const char *plugins) {
    char name[128];
    pool_name(name, sizeof name, what);
    ferrite_pool *pool = NULL;
    ferrite_status status = ferrite_pool_create(session, name, 1 << 20, 64,
                                                FERRITE_POOL_CREATE_ONLY | flags, plugins, &pool);
    if (status != FERRITE_OK) {
        fprintf(stderr, "    create pool %s: %s: %s\n", name, ferrite_status_name(status),
                ferrite_last_error());
    }
    return pool;
}

/* Closes a pool made by new_pool and deletes it. */
static void drop_pool(ferrite_session *session, ferrite_pool *pool, const char *what) {
    char name[128];
    pool_name(name, sizeof name, what);
    CHECK_OK(ferrite_pool_close(pool));
    CHECK_OK(ferrite_pool_delete(session, name));
}

static int buffer_is(ferrite_buffer buffer, const char *text) {
    size_t len = strlen(text);
    return buffer.len == len && (len == 0 || memcmp(buffer.data, text, len) == 0);
}

static int put_text(ferrite_pool *pool, const char *key, const char *value) {
    return ferrite_put(pool, (const uint8_t *)key, strlen(key), (const uint8_t *)value,
                       strlen(value), 0) == FERRITE_OK;
}

#define KEY(text) (const uint8_t *)(text), strlen(text)

/* ---------------------------------------------------------------- the tests */

/* Statuses keep the wire's numbers and names; the small string functions never fail. */
static void test_statuses_and_version(void) {
    CHECK(FERRITE_OK == 0);
    CHECK(FERRITE_KEY_NOT_FOUND == 13);
    CHECK(FERRITE_POOL_NOT_FOUND == 8);
    CHECK(FERRITE_QUOTA_EXCEEDED == 27);
    CHECK(FERRITE_NOT_LEADER == 28);
    CHECK(strcmp(ferrite_status_name(FERRITE_NOT_LEADER), "not_leader") == 0);
    CHECK(strcmp(ferrite_status_name(FERRITE_KEY_NOT_FOUND), "key_not_found") == 0);
    CHECK(strcmp(ferrite_status_name(FERRITE_ERR_BUFFER_TOO_SMALL), "err_buffer_too_small") == 0);
    CHECK(strcmp(ferrite_status_name(FERRITE_PENDING), "pending") == 0);
    CHECK(strcmp(ferrite_status_name(4242), "unknown") == 0);
    CHECK(ferrite_version() != NULL && ferrite_version()[0] != '\0');
    CHECK(ferrite_last_error() != NULL);
}

/* A listener that accepts connections (the kernel does) but never answers the handshake. */
static int silent_listener(char *address, size_t cap) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sin;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof sin) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    snprintf(address, cap, "127.0.0.1:%d", ntohs(sin.sin_port));
    return fd;
}

/* Connecting fails cleanly: bad arguments, bad options, nobody listening, nobody answering. */
static void test_connect_errors(void) {
    ferrite_session *session = (ferrite_session *)&session; /* garbage the call must clear */
    CHECK_STATUS(ferrite_connect(NULL, NULL, &session), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(session == NULL);
    CHECK(strstr(ferrite_last_error(), "address") != NULL);
    CHECK_STATUS(ferrite_connect(addr, NULL, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_connect("127.0.0.1:\xff\xfe", NULL, &session),
                 FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "UTF-8") != NULL);

    /* Port 1 on loopback: nobody listens there. */
    CHECK_STATUS(ferrite_connect("127.0.0.1:1", NULL, &session), FERRITE_ERR_IO);
    CHECK(session == NULL);
    CHECK(strstr(ferrite_last_error(), "127.0.0.1:1") != NULL);

    ferrite_options options = FERRITE_OPTIONS_INIT;
    options.tls_client_cert_file = "client.pem";
    CHECK_STATUS(ferrite_connect(addr, &options, &session), FERRITE_ERR_INVALID_ARGUMENT);
    options.tls_client_key_file = "client-key.pem";
    CHECK_STATUS(ferrite_connect(addr, &options, &session), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "tls_ca_file") != NULL);

    options = (ferrite_options)FERRITE_OPTIONS_INIT;
    options.user = "alice";
    CHECK_STATUS(ferrite_connect(addr, &options, &session), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "password") != NULL);
    options.user = "\xc3\x28";
    options.password = "secret";
    CHECK_STATUS(ferrite_connect(addr, &options, &session), FERRITE_ERR_INVALID_ARGUMENT);

    options = (ferrite_options)FERRITE_OPTIONS_INIT;
    options.tls_ca_file = "/nonexistent/ca.pem";
    CHECK_STATUS(ferrite_connect(addr, &options, &session), FERRITE_ERR_IO);
    CHECK(strstr(ferrite_last_error(), "/nonexistent/ca.pem") != NULL);

    char silent[64];
    int fd = silent_listener(silent, sizeof silent);
    REQUIRE(fd >= 0);
    options = (ferrite_options)FERRITE_OPTIONS_INIT;
    options.connect_timeout_ms = 200;
    CHECK_STATUS(ferrite_connect(silent, &options, &session), FERRITE_ERR_IO);
    CHECK(strstr(ferrite_last_error(), "handshake") != NULL);
    CHECK(session == NULL);
    close(fd);
}

/* Options that only name the client and bound the connect work against a plain server. */
static void test_connect_with_options(void) {
    ferrite_options options = FERRITE_OPTIONS_INIT;
    options.client_name = "libferrite C test";
    options.connect_timeout_ms = 5000;
    ferrite_session *session = NULL;
    CHECK_OK(ferrite_connect(addr, &options, &session));
    CHECK(session != NULL);
    CHECK_OK(ferrite_session_close(session));
    CHECK_OK(ferrite_session_close(NULL));
}

/* ferrite_options as a header whose struct ended at connect_timeout_ms declares it: what a program
 * built against an older ferrite.h passes once the struct has grown. */
typedef struct {
    uint32_t struct_size;
    uint32_t reserved;
    const char *client_name;
    uint64_t connect_timeout_ms;
} older_options;
_Static_assert(sizeof(older_options) == offsetof(ferrite_options, tls_ca_file),
               "older_options is ferrite_options up to connect_timeout_ms");

/* ferrite_options carries its size: a struct of an older, smaller layout still connects, and the
 * library reads nothing past the size it declares (it is malloc'ed at that size, so valgrind sees
 * any read beyond); a size this library cannot know (0, as `{0}` leaves it; larger than its own,
 * from a newer header; inside a field) or a reserved field that is not 0 is refused, naming it. */
static void test_options_carry_their_size(void) {
    ferrite_session *session = NULL;
    older_options *older = malloc(sizeof *older);
    REQUIRE(older != NULL);
    *older = (older_options){(uint32_t)sizeof *older, 0, "libferrite C test, older options", 5000};
    CHECK_OK(ferrite_connect(addr, (const ferrite_options *)older, &session));
    CHECK(session != NULL);
    CHECK_OK(ferrite_session_close(session));
    free(older);

    ferrite_options zeroed = {0};
    CHECK_STATUS(ferrite_connect(addr, &zeroed, &session), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "FERRITE_OPTIONS_INIT") != NULL);
    CHECK(session == NULL);

    struct {
        ferrite_options options;
        uint64_t newer_field;
    } newer = {FERRITE_OPTIONS_INIT, 0};
    newer.options.struct_size = (uint32_t)sizeof newer;
    CHECK_STATUS(ferrite_connect(addr, &newer.options, &session), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "newer") != NULL);

    ferrite_options options = FERRITE_OPTIONS_INIT;
    options.struct_size = (uint32_t)offsetof(ferrite_options, connect_timeout_ms) + 4;
    CHECK_STATUS(ferrite_connect(addr, &options, &session), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "struct_size") != NULL);

    options = (ferrite_options)FERRITE_OPTIONS_INIT;
    options.reserved = 1;
    CHECK_STATUS(ferrite_connect(addr, &options, &session), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "reserved") != NULL);
    CHECK(session == NULL);
}

static const ferrite_pool_info *find_pool(const ferrite_pool_info_list *list, const char *name) {
    for (size_t i = 0; i < list->len; i++) {
        if (strcmp(list->items[i].name, name) == 0) return &list->items[i];
    }
    return NULL;
}

/* Create, open, list, delete, and each of their refusals, with the wire's status codes. */
static void test_pool_lifecycle(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    char name[128];
    pool_name(name, sizeof name, "lifecycle");

    ferrite_pool *pool = NULL;
    bool created = false;
    CHECK_OK(ferrite_pool_create(session, name, 2 << 20, 100, FERRITE_POOL_CREATE_ONLY, NULL, &pool));
    REQUIRE(pool != NULL);
    CHECK_OK(ferrite_pool_created(pool, &created));
    CHECK(created);

    ferrite_pool *again = (ferrite_pool *)&again;
    CHECK_STATUS(ferrite_pool_create(session, name, 2 << 20, 100, FERRITE_POOL_CREATE_ONLY, NULL, &again),
                 FERRITE_POOL_EXISTS);
    CHECK(again == NULL);
    CHECK_OK(ferrite_pool_create(session, name, 2 << 20, 100, 0, NULL, &again));
    CHECK_OK(ferrite_pool_created(again, &created));
    CHECK(!created);
    ferrite_pool *opened = NULL;
    CHECK_OK(ferrite_pool_open(session, name, &opened));
    CHECK_OK(ferrite_pool_created(opened, &created));
    CHECK(!created);
    CHECK(put_text(pool, "k", "v"));

    ferrite_pool_info_list list = {0};
    CHECK_OK(ferrite_pool_list(session, &list));
    const ferrite_pool_info *info = find_pool(&list, name);
    CHECK(info != NULL);
    if (info != NULL) {
        CHECK(info->objects == 1);
        CHECK(info->size_bytes == 2 << 20);
        CHECK(info->open_count == 3);
        CHECK(strcmp(info->plugins, "") == 0);
        CHECK(info->flags == 0); /* not indexed, sync */
    }
    ferrite_pool_info_list_free(&list);
    CHECK(list.items == NULL && list.len == 0);
    ferrite_pool_info_list_free(&list); /* a second free is harmless */
    ferrite_pool_info_list_free(NULL);

    CHECK_STATUS(ferrite_pool_delete(session, name), FERRITE_POOL_IN_USE);
    CHECK_OK(ferrite_pool_close(again));
    CHECK_OK(ferrite_pool_close(opened));
    CHECK_OK(ferrite_pool_close(pool));
    CHECK_OK(ferrite_pool_close(NULL));
    CHECK_OK(ferrite_pool_delete(session, name));

    CHECK_STATUS(ferrite_pool_open(session, name, &opened), FERRITE_POOL_NOT_FOUND);
    CHECK(opened == NULL);
    CHECK_STATUS(ferrite_pool_delete(session, name), FERRITE_POOL_NOT_FOUND);
    CHECK_STATUS(ferrite_pool_create(session, name, 0, 0, 0, NULL, &pool), FERRITE_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_create(session, "", 1 << 20, 0, 0, NULL, &pool), FERRITE_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_create(session, name, 1 << 20, 0, 0x80, NULL, &pool),
                 FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_create(session, "bad\xff", 1 << 20, 0, 0, NULL, &pool),
                 FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_create(session, name, 1 << 20, 0, 0, "no-such-plugin", &pool),
                 FERRITE_INVALID_ARGUMENT);

    /* Indexed, asynchronous durability and a plugin chain are accepted and reported (the
     * settings as the creation flags name them). */
    pool = new_pool(session, "flags", FERRITE_POOL_INDEXED | FERRITE_POOL_ASYNC, " counter ");
    REQUIRE(pool != NULL);
    CHECK(put_text(pool, "k", "v"));
    CHECK_OK(ferrite_pool_list(session, &list));
    pool_name(name, sizeof name, "flags");
    info = find_pool(&list, name);
    CHECK(info != NULL && strcmp(info->plugins, "counter") == 0);
    CHECK(info != NULL && info->flags == (FERRITE_POOL_INDEXED | FERRITE_POOL_ASYNC));
    ferrite_pool_info_list_free(&list);
    drop_pool(session, pool, "flags");
    CHECK_OK(ferrite_session_close(session));
}

/* Put and get, with every put flag and the refusals they cause. */
static void test_put_get(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_pool(session, "putget", 0, NULL);
    REQUIRE(pool != NULL);

    ferrite_buffer value = {0};
    CHECK_OK(ferrite_put(pool, KEY("k1"), KEY("v1"), 0));
    CHECK_OK(ferrite_get(pool, KEY("k1"), &value));
    CHECK(buffer_is(value, "v1"));
    ferrite_buffer_free(&value);
    CHECK(value.data == NULL && value.len == 0);
    ferrite_buffer_free(&value);
    ferrite_buffer_free(NULL);

    CHECK_OK(ferrite_put(pool, KEY("k1"), KEY("v2"), 0));
    CHECK_STATUS(ferrite_put(pool, KEY("k1"), KEY("v3"), FERRITE_PUT_CREATE_ONLY), FERRITE_KEY_EXISTS);
    CHECK_STATUS(ferrite_put(pool, KEY("k2"), KEY("v"), FERRITE_PUT_UPDATE_ONLY), FERRITE_KEY_NOT_FOUND);
    CHECK_OK(ferrite_put(pool, KEY("k1"), KEY("v4"), FERRITE_PUT_UPDATE_ONLY | FERRITE_PUT_SYNC));
    CHECK_OK(ferrite_put(pool, KEY("k2"), KEY("v5"), FERRITE_PUT_CREATE_ONLY | FERRITE_PUT_ASYNC));
    CHECK_STATUS(ferrite_put(pool, KEY("k1"), KEY("v"), FERRITE_PUT_CREATE_ONLY | FERRITE_PUT_UPDATE_ONLY),
                 FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_put(pool, KEY("k1"), KEY("v"), FERRITE_PUT_SYNC | FERRITE_PUT_ASYNC),
                 FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_put(pool, KEY("k1"), KEY("v"), 0x100), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_OK(ferrite_get(pool, KEY("k1"), &value));
    CHECK(buffer_is(value, "v4"));
    ferrite_buffer_free(&value);

    value.data = (uint8_t *)&value; /* garbage the call must clear */
    CHECK_STATUS(ferrite_get(pool, KEY("missing"), &value), FERRITE_KEY_NOT_FOUND);
    CHECK(value.data == NULL && value.len == 0);

    /* Empty values, and binary ones with NULs, round-trip. */
    CHECK_OK(ferrite_put(pool, KEY("empty"), NULL, 0, 0));
    CHECK_OK(ferrite_get(pool, KEY("empty"), &value));
    CHECK(value.data == NULL && value.len == 0);
    uint8_t binary[256];
    for (int i = 0; i < 256; i++) binary[i] = (uint8_t)i;
    CHECK_OK(ferrite_put(pool, KEY("binary"), binary, sizeof binary, 0));
    CHECK_OK(ferrite_get(pool, KEY("binary"), &value));
    CHECK(value.len == sizeof binary && memcmp(value.data, binary, sizeof binary) == 0);
    ferrite_buffer_free(&value);

    /* Limits are checked before sending, with the code the server would give. A value past the
     * inline limit goes as a direct put, which this 1 MiB pool has no room for. */
    size_t big_len = 70 * 1024;
    uint8_t *big = calloc(3 << 20, 1);
    REQUIRE(big != NULL);
    CHECK_STATUS(ferrite_put(pool, big, big_len, KEY("v"), 0), FERRITE_KEY_TOO_LARGE);
    CHECK_STATUS(ferrite_put(pool, KEY("k"), big, 3 << 20, 0), FERRITE_POOL_FULL);
    CHECK_STATUS(ferrite_get(pool, big, big_len, &value), FERRITE_KEY_TOO_LARGE);
    free(big);

    CHECK_STATUS(ferrite_put(pool, NULL, 3, KEY("v"), 0), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "key") != NULL);
    CHECK_STATUS(ferrite_put(pool, KEY("k"), NULL, 3, 0), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_get(pool, KEY("k1"), NULL), FERRITE_ERR_INVALID_ARGUMENT);

    drop_pool(session, pool, "putget");
    CHECK_OK(ferrite_session_close(session));
}

/* The direct form: into the caller's buffer, or the length it needs. */
static void test_get_into(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_pool(session, "getinto", 0, NULL);
    REQUIRE(pool != NULL);
    CHECK(put_text(pool, "greeting", "hello world"));

    uint8_t buf[64];
    size_t len = 999;
    CHECK_OK(ferrite_get_into(pool, KEY("greeting"), buf, sizeof buf, &len));
    CHECK(len == 11 && memcmp(buf, "hello world", 11) == 0);
    CHECK_OK(ferrite_get_into(pool, KEY("greeting"), buf, 11, &len));
    CHECK(len == 11);

    memset(buf, 'x', sizeof buf);
    CHECK_STATUS(ferrite_get_into(pool, KEY("greeting"), buf, 5, &len), FERRITE_ERR_BUFFER_TOO_SMALL);
    CHECK(len == 11);
    CHECK(buf[0] == 'x' && buf[4] == 'x'); /* nothing copied */
    CHECK(strstr(ferrite_last_error(), "11") != NULL);
    CHECK_STATUS(ferrite_get_into(pool, KEY("greeting"), NULL, 0, &len), FERRITE_ERR_BUFFER_TOO_SMALL);
    CHECK(len == 11);

    CHECK_STATUS(ferrite_get_into(pool, KEY("missing"), buf, sizeof buf, &len), FERRITE_KEY_NOT_FOUND);
    CHECK(len == 0);
    CHECK_OK(ferrite_put(pool, KEY("empty"), NULL, 0, 0));
    CHECK_OK(ferrite_get_into(pool, KEY("empty"), NULL, 0, &len));
    CHECK(len == 0);

    CHECK_STATUS(ferrite_get_into(pool, KEY("greeting"), buf, sizeof buf, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_get_into(pool, KEY("greeting"), NULL, 8, &len), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_get_into(NULL, KEY("greeting"), buf, sizeof buf, &len), FERRITE_ERR_INVALID_ARGUMENT);

    drop_pool(session, pool, "getinto");
    CHECK_OK(ferrite_session_close(session));
}

/* Values past the inline limit (2 MiB) travel as direct transfers by themselves: put, get,
 * get_into (straight into the caller's buffer) and the asynchronous forms. 5 MiB keeps valgrind
 * quick. */
#define LARGE_LEN ((size_t)5 << 20)

static void fill_pattern(uint8_t *bytes, size_t len, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes[i] = (uint8_t)x;
    }
}

static ferrite_pool *new_large_pool(ferrite_session *session, const char *what) {
    char name[128];
    pool_name(name, sizeof name, what);
    ferrite_pool *pool = NULL;
    ferrite_status status =
        ferrite_pool_create(session, name, 64 << 20, 64, FERRITE_POOL_CREATE_ONLY, NULL, &pool);
    if (status != FERRITE_OK) {
        fprintf(stderr, "    create pool %s: %s: %s\n", name, ferrite_status_name(status),
                ferrite_last_error());
    }
    return pool;
}

static void test_large_values(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_large_pool(session, "large");
    REQUIRE(pool != NULL);
    uint8_t *value = malloc(LARGE_LEN);
    uint8_t *into = malloc(LARGE_LEN + 16);
    REQUIRE(value != NULL && into != NULL);
    fill_pattern(value, LARGE_LEN, 1);

    CHECK_OK(ferrite_put(pool, KEY("large"), value, LARGE_LEN, 0));
    ferrite_buffer got = {0};
    CHECK_OK(ferrite_get(pool, KEY("large"), &got));
    CHECK(got.len == LARGE_LEN && memcmp(got.data, value, LARGE_LEN) == 0);
    ferrite_buffer_free(&got);
    ferrite_value_attributes attributes = {0};
    CHECK_OK(ferrite_get_attributes(pool, KEY("large"), &attributes));
    CHECK(attributes.length == LARGE_LEN);

    /* Into a larger buffer: the value at its start, the rest untouched. */
    size_t len = 0;
    memset(into, 0xEE, LARGE_LEN + 16);
    CHECK_OK(ferrite_get_into(pool, KEY("large"), into, LARGE_LEN + 16, &len));
    CHECK(len == LARGE_LEN && memcmp(into, value, LARGE_LEN) == 0);
    CHECK(into[LARGE_LEN] == 0xEE && into[LARGE_LEN + 15] == 0xEE);
    /* Into a buffer of exactly its length. */
    memset(into, 0, LARGE_LEN);
    CHECK_OK(ferrite_get_into(pool, KEY("large"), into, LARGE_LEN, &len));
    CHECK(len == LARGE_LEN && memcmp(into, value, LARGE_LEN) == 0);

    /* Too small, whether the buffer is past the inline limit or not: nothing is copied and the
     * length needed is stored. */
    size_t smaller[] = {LARGE_LEN - 1, 3 << 20, 1024, 0};
    for (size_t i = 0; i < sizeof smaller / sizeof smaller[0]; i++) {
        memset(into, 0xAB, LARGE_LEN);
        len = 0;
        CHECK_STATUS(ferrite_get_into(pool, KEY("large"), smaller[i] ? into : NULL, smaller[i], &len),
                     FERRITE_ERR_BUFFER_TOO_SMALL);
        CHECK(len == LARGE_LEN);
        CHECK(into[0] == 0xAB && into[smaller[i] ? smaller[i] - 1 : 0] == 0xAB);
    }
    CHECK(strstr(ferrite_last_error(), "5242880") != NULL);
    /* A small value in a buffer past the inline limit, and a missing key. */
    CHECK(put_text(pool, "small", "hello world"));
    CHECK_OK(ferrite_get_into(pool, KEY("small"), into, LARGE_LEN, &len));
    CHECK(len == 11 && memcmp(into, "hello world", 11) == 0);
    CHECK_STATUS(ferrite_get_into(pool, KEY("missing"), into, LARGE_LEN, &len), FERRITE_KEY_NOT_FOUND);
    CHECK(len == 0);

    /* A second large value replaces the first at once. */
    fill_pattern(value, LARGE_LEN, 2);
    CHECK_OK(ferrite_put(pool, KEY("large"), value, LARGE_LEN, FERRITE_PUT_UPDATE_ONLY | FERRITE_PUT_SYNC));
    CHECK_OK(ferrite_get_into(pool, KEY("large"), into, LARGE_LEN, &len));
    CHECK(len == LARGE_LEN && memcmp(into, value, LARGE_LEN) == 0);
    CHECK_STATUS(ferrite_put(pool, KEY("large"), value, LARGE_LEN, FERRITE_PUT_CREATE_ONLY), FERRITE_KEY_EXISTS);

    /* The asynchronous forms. */
    ferrite_op *op = NULL;
    CHECK_OK(ferrite_get_async(pool, KEY("large"), &op));
    CHECK_OK(ferrite_op_wait(op, FERRITE_WAIT_FOREVER));
    CHECK_OK(ferrite_op_result_buffer(op, &got));
    CHECK(got.len == LARGE_LEN && memcmp(got.data, value, LARGE_LEN) == 0);
    ferrite_buffer_free(&got);
    ferrite_op_free(op);
    fill_pattern(into, 3 << 20, 3);
    CHECK_OK(ferrite_put_async(pool, KEY("async-large"), into, 3 << 20, 0, &op));
    memset(into, 0, 3 << 20); /* the library copied it */
    CHECK_OK(ferrite_op_wait(op, FERRITE_WAIT_FOREVER));
    ferrite_op_free(op);
    CHECK_OK(ferrite_get(pool, KEY("async-large"), &got));
    fill_pattern(into, 3 << 20, 3);
    CHECK(got.len == (size_t)3 << 20 && memcmp(got.data, into, 3 << 20) == 0);
    ferrite_buffer_free(&got);

    /* Past the server's direct limit, when run.sh set one. */
    const char *direct_max = getenv("FERRITE_TEST_DIRECT_MAX");
    if (direct_max != NULL && direct_max[0] != '\0') {
        size_t too_long = (size_t)strtoull(direct_max, NULL, 10) + 1;
        uint8_t *huge = calloc(too_long, 1);
        REQUIRE(huge != NULL);
        CHECK_STATUS(ferrite_put(pool, KEY("huge"), huge, too_long, 0), FERRITE_VALUE_TOO_LARGE);
        CHECK(strstr(ferrite_last_error(), "direct_value_bytes_max") != NULL);
        free(huge);
        CHECK_STATUS(ferrite_get(pool, KEY("huge"), &got), FERRITE_KEY_NOT_FOUND);
    }

    free(value);
    free(into);
    drop_pool(session, pool, "large");
    CHECK_OK(ferrite_session_close(session));
}

/* Reading and writing inside a value: ferrite_get_offset and ferrite_put_offset. */
static void test_offsets(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_large_pool(session, "offsets");
    REQUIRE(pool != NULL);
    uint8_t *value = malloc(LARGE_LEN);
    uint8_t *buf = malloc(3 << 20);
    REQUIRE(value != NULL && buf != NULL);
    fill_pattern(value, LARGE_LEN, 4);
    CHECK_OK(ferrite_put(pool, KEY("v"), value, LARGE_LEN, 0));

    size_t len = 999;
    /* The start, the end, a slice across pieces (1 MiB each), and the very end. */
    CHECK_OK(ferrite_get_offset(pool, KEY("v"), 0, buf, 100, &len));
    CHECK(len == 100 && memcmp(buf, value, 100) == 0);
    CHECK_OK(ferrite_get_offset(pool, KEY("v"), LARGE_LEN - 10, buf, 100, &len));
    CHECK(len == 10 && memcmp(buf, value + LARGE_LEN - 10, 10) == 0);
    CHECK_OK(ferrite_get_offset(pool, KEY("v"), (1 << 20) - 50, buf, 3 << 20, &len));
    CHECK(len == (size_t)3 << 20 && memcmp(buf, value + (1 << 20) - 50, 3 << 20) == 0);
    CHECK_OK(ferrite_get_offset(pool, KEY("v"), LARGE_LEN, buf, 100, &len));
    CHECK(len == 0);
    CHECK_OK(ferrite_get_offset(pool, KEY("v"), 7, NULL, 0, &len));
    CHECK(len == 0);
    /* Past the end: the server's invalid_argument. */
    len = 999;
    CHECK_STATUS(ferrite_get_offset(pool, KEY("v"), LARGE_LEN + 1, buf, 100, &len), FERRITE_INVALID_ARGUMENT);
    CHECK(len == 0);
    CHECK(strstr(ferrite_last_error(), "past the end") != NULL);
    CHECK_STATUS(ferrite_get_offset(pool, KEY("missing"), 0, buf, 100, &len), FERRITE_KEY_NOT_FOUND);
    /* An inline value reads the same way. */
    CHECK(put_text(pool, "small", "hello world"));
    CHECK_OK(ferrite_get_offset(pool, KEY("small"), 6, buf, 100, &len));
    CHECK(len == 5 && memcmp(buf, "world", 5) == 0);

    /* Writes inside the value keep its length; one of 3 MiB goes in several pieces. */
    memset(buf, 'x', 100);
    CHECK_OK(ferrite_put_offset(pool, KEY("v"), (2 << 20) - 50, buf, 100, 0));
    memcpy(value + (2 << 20) - 50, buf, 100);
    fill_pattern(buf, 3 << 20, 5);
    CHECK_OK(ferrite_put_offset(pool, KEY("v"), LARGE_LEN - (3 << 20), buf, 3 << 20, FERRITE_PUT_SYNC));
    memcpy(value + LARGE_LEN - (3 << 20), buf, 3 << 20);
    CHECK_OK(ferrite_put_offset(pool, KEY("v"), 0, KEY("head"), FERRITE_PUT_ASYNC));
    memcpy(value, "head", 4);
    ferrite_buffer got = {0};
    CHECK_OK(ferrite_get(pool, KEY("v"), &got));
    CHECK(got.len == LARGE_LEN && memcmp(got.data, value, LARGE_LEN) == 0);
    ferrite_buffer_free(&got);
    CHECK_OK(ferrite_put_offset(pool, KEY("small"), 0, KEY("HELLO"), 0));
    CHECK_OK(ferrite_get(pool, KEY("small"), &got));
    CHECK(buffer_is(got, "HELLO world"));
    ferrite_buffer_free(&got);

    /* Past the end, a missing key, and flags that do not apply. */
    CHECK_STATUS(ferrite_put_offset(pool, KEY("v"), LARGE_LEN - 10, buf, 20, 0), FERRITE_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_put_offset(pool, KEY("small"), 12, KEY("x"), 0), FERRITE_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_put_offset(pool, KEY("missing"), 0, KEY("x"), 0), FERRITE_KEY_NOT_FOUND);
    CHECK_STATUS(ferrite_put_offset(pool, KEY("v"), 0, KEY("x"), FERRITE_PUT_CREATE_ONLY),
                 FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_put_offset(pool, KEY("v"), 0, KEY("x"), FERRITE_PUT_SYNC | FERRITE_PUT_ASYNC),
                 FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_OK(ferrite_get(pool, KEY("small"), &got));
    CHECK(buffer_is(got, "HELLO world"));
    ferrite_buffer_free(&got);

    /* Bad pointers. */
    CHECK_STATUS(ferrite_get_offset(pool, KEY("v"), 0, NULL, 8, &len), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_get_offset(pool, KEY("v"), 0, buf, 8, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_get_offset(NULL, KEY("v"), 0, buf, 8, &len), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_put_offset(pool, KEY("v"), 0, NULL, 8, 0), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_put_offset(NULL, KEY("v"), 0, KEY("x"), 0), FERRITE_ERR_INVALID_ARGUMENT);

    free(value);
    free(buf);
    drop_pool(session, pool, "offsets");
    CHECK_OK(ferrite_session_close(session));
}

/* Erase and count; a missing key is the wire's key_not_found, number 13. */
static void test_erase_and_count(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_pool(session, "erase", 0, NULL);
    REQUIRE(pool != NULL);

    uint64_t count = 99;
    CHECK_OK(ferrite_count(pool, &count));
    CHECK(count == 0);
    CHECK(put_text(pool, "a", "1") && put_text(pool, "b", "2") && put_text(pool, "c", "3"));
    CHECK_OK(ferrite_count(pool, &count));
    CHECK(count == 3);
    CHECK_OK(ferrite_erase(pool, KEY("b")));
    CHECK_OK(ferrite_count(pool, &count));
    CHECK(count == 2);

    ferrite_status status = ferrite_erase(pool, KEY("b"));
    CHECK_STATUS(status, FERRITE_KEY_NOT_FOUND);
    CHECK((int)status == 13);
    CHECK(strstr(ferrite_last_error(), "key_not_found") != NULL);

    CHECK_STATUS(ferrite_count(pool, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_count(NULL, &count), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_erase(NULL, KEY("a")), FERRITE_ERR_INVALID_ARGUMENT);

    drop_pool(session, pool, "erase");
    CHECK_OK(ferrite_session_close(session));
}

static int keys_are(const ferrite_key_list *list, const char **expected, size_t n) {
    if (list->len != n) return 0;
    for (size_t i = 0; i < n; i++) {
        if (!buffer_is(list->keys[i], expected[i])) return 0;
    }
    return 1;
}

/* Every find kind, on an indexed pool and on one without an index. */
static void test_find(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    for (int indexed = 0; indexed < 2; indexed++) {
        const char *what = indexed ? "find-indexed" : "find";
        ferrite_pool *pool = new_pool(session, what, indexed ? FERRITE_POOL_INDEXED : 0, NULL);
        REQUIRE(pool != NULL);
        CHECK(put_text(pool, "user:1", "a") && put_text(pool, "user:2", "b") &&
              put_text(pool, "user:10", "c") && put_text(pool, "order:1", "d"));

        ferrite_key_list keys = {0};
        const char *users[] = {"user:1", "user:10", "user:2"};
        CHECK_OK(ferrite_find(pool, FERRITE_FIND_PREFIX, KEY("user:"), &keys));
        CHECK(keys_are(&keys, users, 3));
        ferrite_key_list_free(&keys);
        CHECK(keys.keys == NULL && keys.len == 0);

        const char *order[] = {"order:1"};
        CHECK_OK(ferrite_find(pool, FERRITE_FIND_EXACT, KEY("order:1"), &keys));
        CHECK(keys_are(&keys, order, 1));
        ferrite_key_list_free(&keys);

        const char *single[] = {"user:1", "user:2"};
        CHECK_OK(ferrite_find(pool, FERRITE_FIND_REGEX, KEY("^user:[0-9]$"), &keys));
        CHECK(keys_are(&keys, single, 2));
        ferrite_key_list_free(&keys);

        const char *ones[] = {"user:1", "user:10"};
        CHECK_OK(ferrite_find(pool, FERRITE_FIND_GLOB, KEY("user:1*"), &keys));
        CHECK(keys_are(&keys, ones, 2));
        ferrite_key_list_free(&keys);

        CHECK_OK(ferrite_find(pool, FERRITE_FIND_PREFIX, KEY("nobody"), &keys));
        CHECK(keys.len == 0 && keys.keys == NULL);
        ferrite_key_list_free(&keys);

        CHECK_STATUS(ferrite_find(pool, FERRITE_FIND_REGEX, KEY("(unclosed"), &keys), FERRITE_INVALID_ARGUMENT);
        CHECK(keys.len == 0);
        CHECK_STATUS(ferrite_find(pool, 99, KEY("user"), &keys), FERRITE_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(ferrite_find(pool, FERRITE_FIND_PREFIX, KEY("user"), NULL), FERRITE_ERR_INVALID_ARGUMENT);
        ferrite_key_list_free(NULL);
        drop_pool(session, pool, what);
    }
    CHECK_OK(ferrite_session_close(session));
}

/* An index added to a pool that has none serves FERRITE_FIND_NEXT; removed, it no longer does. */
static void test_configure_index(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_pool(session, "configure", 0, NULL);
    REQUIRE(pool != NULL);
    char name[128];
    pool_name(name, sizeof name, "configure");
    CHECK(put_text(pool, "b", "v") && put_text(pool, "a", "v") && put_text(pool, "d", "v") && put_text(pool, "c", "v"));
    ferrite_key_list keys = {0};
    CHECK_STATUS(ferrite_find(pool, FERRITE_FIND_NEXT, KEY("b"), &keys), FERRITE_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "secondary index") != NULL);
    CHECK_OK(ferrite_pool_configure(session, name, FERRITE_POOL_ADD_INDEX));
    const char *after_b[] = {"c", "d"};
    CHECK_OK(ferrite_find(pool, FERRITE_FIND_NEXT, KEY("b"), &keys));
    CHECK(keys_are(&keys, after_b, 2));
    ferrite_key_list_free(&keys);
    CHECK_OK(ferrite_pool_configure(session, name, FERRITE_POOL_REMOVE_INDEX));
    CHECK_STATUS(ferrite_find(pool, FERRITE_FIND_NEXT, KEY("b"), &keys), FERRITE_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_configure(session, name, 3), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_configure(session, "no-such-pool-here", FERRITE_POOL_ADD_INDEX), FERRITE_POOL_NOT_FOUND);
    CHECK_STATUS(ferrite_pool_configure(NULL, name, FERRITE_POOL_ADD_INDEX), FERRITE_ERR_INVALID_ARGUMENT);
    drop_pool(session, pool, "configure");
    CHECK_OK(ferrite_session_close(session));
}

/* Attributes of a value and of its pool, and every shard's counters. */
static void test_attributes_and_statistics(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_pool(session, "attributes", 0, NULL);
    REQUIRE(pool != NULL);
    CHECK(put_text(pool, "greeting", "hello"));
    ferrite_value_attributes value = {0};
    CHECK_OK(ferrite_get_attributes(pool, KEY("greeting"), &value));
    CHECK(value.length == 5 && value.crc32 == 0x3610a686u && value.write_time_ns > 0);
    CHECK_STATUS(ferrite_get_attributes(pool, KEY("absent"), &value), FERRITE_KEY_NOT_FOUND);
    CHECK_STATUS(ferrite_get_attributes(pool, KEY("greeting"), NULL), FERRITE_ERR_INVALID_ARGUMENT);
    ferrite_pool_attributes attributes = {0};
    CHECK_OK(ferrite_get_pool_attributes(pool, &attributes));
    CHECK(attributes.objects == 1 && attributes.size_bytes == 1 << 20 && attributes.used_bytes > 0);

    ferrite_statistic_list counters = {0};
    CHECK_OK(ferrite_statistics(session, &counters));
    int puts_seen = 0, shards_seen = 0;
    for (size_t i = 0; i < counters.len; i++) {
        if (strcmp(counters.items[i].name, "puts") == 0) puts_seen += counters.items[i].value > 0;
        if (strcmp(counters.items[i].name, "shard") == 0) shards_seen++;
    }
    CHECK(puts_seen >= 1 && shards_seen == 2);
    ferrite_statistic_list_free(&counters);
    CHECK(counters.items == NULL && counters.len == 0);
    ferrite_statistic_list_free(NULL);
    drop_pool(session, pool, "attributes");
    CHECK_OK(ferrite_session_close(session));
}

/* A server not in cluster mode maps as one node (id 0, at its shard 0) leading both groups of
   the two-shard test server; freeing the map empties it, and a second free is harmless. */
static void test_cluster_map(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_cluster_map map = {0};
    CHECK_OK(ferrite_cluster_map_get(session, &map));
    CHECK(map.single_server && map.version == 0 && strcmp(map.cluster_id, "") == 0);
    CHECK(map.node_count == 1 && map.nodes[0].node_id == 0 && strchr(map.nodes[0].native, ':') != NULL);
    CHECK(map.group_count == 2);
    for (size_t g = 0; g < map.group_count; g++) {
        CHECK(map.groups[g].leader == 0 && map.groups[g].voter_count == 1 && map.groups[g].voters[0] == 0);
        CHECK(map.groups[g].learner_count == 0 && map.groups[g].learners == NULL);
    }
    ferrite_cluster_map_free(&map);
    CHECK(map.nodes == NULL && map.groups == NULL && map.cluster_id == NULL);
    ferrite_cluster_map_free(&map);
    ferrite_cluster_map_free(NULL);
    CHECK_STATUS(ferrite_cluster_map_get(session, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_cluster_map_get(NULL, &map), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_OK(ferrite_session_close(session));
}

/* A three-node cluster (FERRITE_TEST_CLUSTER_ADDRS, the nodes' native addresses separated by
   commas): a session with any node maps all three, and pool requests reach each group's leader
   through whichever node the session was opened with (the library follows not_leader). */
static void test_cluster_follows_leaders(void) {
    const char *list = getenv("FERRITE_TEST_CLUSTER_ADDRS");
    if (list == NULL || list[0] == '\0') {
        skipped = 1;
        return;
    }
    char nodes[3][64] = {{0}};
    size_t count = 0;
    for (const char *at = list; *at != '\0' && count < 3; count++) {
        size_t len = strcspn(at, ",");
        REQUIRE(len > 0 && len < sizeof nodes[0]);
        memcpy(nodes[count], at, len);
        at += len + (at[len] == ',');
    }
    REQUIRE(count == 3);
    char name[128];
    pool_name(name, sizeof name, "cluster");
    for (size_t n = 0; n < count; n++) {
        ferrite_session *session = NULL;
        CHECK_OK(ferrite_connect(nodes[n], NULL, &session));
        REQUIRE(session != NULL);
        ferrite_cluster_map map = {0};
        CHECK_OK(ferrite_cluster_map_get(session, &map));
        CHECK(!map.single_server && map.cluster_id != NULL && map.cluster_id[0] != '\0');
        CHECK(map.node_count == 3);
        ferrite_cluster_map_free(&map);
        ferrite_pool *pool = NULL;
        if (n == 0) {
            CHECK_OK(ferrite_pool_create(session, name, 1 << 20, 64, FERRITE_POOL_CREATE_ONLY, NULL, &pool));
        } else {
            CHECK_OK(ferrite_pool_open(session, name, &pool));
        }
        REQUIRE(pool != NULL);
        char key[32], value[32];
        snprintf(key, sizeof key, "through-%zu", n);
        snprintf(value, sizeof value, "node-%zu", n);
        CHECK(put_text(pool, key, value));
        for (size_t m = 0; m <= n; m++) {
            ferrite_buffer read = {0};
            snprintf(key, sizeof key, "through-%zu", m);
            snprintf(value, sizeof value, "node-%zu", m);
            CHECK_OK(ferrite_get(pool, KEY(key), &read));
            CHECK(buffer_is(read, value));
            ferrite_buffer_free(&read);
        }
        CHECK_OK(ferrite_pool_close(pool));
        if (n + 1 == count) CHECK_OK(ferrite_pool_delete(session, name));
        CHECK_OK(ferrite_session_close(session));
    }
}

static uint64_t le64(ferrite_buffer buffer) {
    uint64_t value = 0;
    for (size_t i = 0; i < buffer.len && i < 8; i++) value |= (uint64_t)buffer.data[i] << (8 * i);
    return value;
}

static int responses_are(const ferrite_response_list *list, const char **texts, size_t n) {
    if (list->len != n) return 0;
    for (size_t i = 0; i < n; i++) {
        if (list->items[i].layer != i || !buffer_is(list->items[i].data, texts[i])) return 0;
    }
    return 1;
}

/* Plugins through the shipped `counter`: create on demand, the flags, chains and failures. */
static void test_invoke(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_pool(session, "counters", 0, "counter");
    REQUIRE(pool != NULL);

    ferrite_response_list answer = {0};
    const char *five[] = {"5"};
    CHECK_OK(ferrite_invoke(pool, KEY("hits"), KEY("add 5"), 0, 8, &answer));
    CHECK(responses_are(&answer, five, 1));
    ferrite_response_list_free(&answer);
    CHECK(answer.items == NULL && answer.len == 0);
    ferrite_response_list_free(&answer);
    ferrite_response_list_free(NULL);

    ferrite_buffer value = {0};
    CHECK_OK(ferrite_get(pool, KEY("hits"), &value));
    CHECK(value.len == 8 && le64(value) == 5);
    ferrite_buffer_free(&value);

    const char *six[] = {"6"};
    CHECK_OK(ferrite_invoke(pool, KEY("hits"), KEY("add 1"), 0, 0, &answer));
    CHECK(responses_are(&answer, six, 1));
    ferrite_response_list_free(&answer);

    CHECK_STATUS(ferrite_invoke(pool, KEY("absent"), KEY("get"), 0, 0, &answer), FERRITE_KEY_NOT_FOUND);
    CHECK_STATUS(ferrite_invoke(pool, KEY("hits"), KEY("add 1"), FERRITE_INVOKE_READ_ONLY, 0, &answer),
                 FERRITE_ADO_FAILED);
    CHECK(answer.len == 0 && answer.items == NULL);
    CHECK_OK(ferrite_invoke(pool, KEY("hits"), KEY("add 1"), FERRITE_INVOKE_FIRE_AND_FORGET, 0, &answer));
    CHECK(answer.len == 0);
    const char *seven[] = {"7"};
    CHECK_OK(ferrite_invoke(pool, KEY("hits"), KEY("get"), FERRITE_INVOKE_READ_ONLY, 0, &answer));
    CHECK(responses_are(&answer, seven, 1));
    ferrite_response_list_free(&answer);

    /* invoke_put stores first, then runs the chain; no-overwrite keeps the value. */
    uint8_t ten[8] = {10, 0, 0, 0, 0, 0, 0, 0};
    uint8_t zero[8] = {0};
    const char *fifteen[] = {"15"};
    CHECK_OK(ferrite_invoke_put(pool, KEY("p"), ten, 8, KEY("add 5"), 0, &answer));
    CHECK(responses_are(&answer, fifteen, 1));
    ferrite_response_list_free(&answer);
    CHECK_OK(ferrite_invoke_put(pool, KEY("p"), zero, 8, KEY("get"), FERRITE_INVOKE_NO_OVERWRITE, &answer));
    CHECK(responses_are(&answer, fifteen, 1));
    ferrite_response_list_free(&answer);

    CHECK_STATUS(ferrite_invoke(pool, KEY("hits"), KEY("get"), FERRITE_INVOKE_DETACHED, 0, &answer),
                 FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_invoke_put(pool, KEY("p"), ten, 8, KEY("get"), FERRITE_INVOKE_READ_ONLY, &answer),
                 FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_invoke(pool, KEY("hits"), NULL, 4, 0, 0, &answer), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_invoke(pool, KEY("hits"), KEY("get"), 0, 0, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_invoke_put(NULL, KEY("p"), ten, 8, KEY("get"), 0, &answer),
                 FERRITE_ERR_INVALID_ARGUMENT);
    drop_pool(session, pool, "counters");

    /* A chain answers with one buffer per layer, in chain order. */
    pool = new_pool(session, "chain", 0, "counter,counter");
    REQUIRE(pool != NULL);
    const char *layers[] = {"1", "2"};
    CHECK_OK(ferrite_invoke(pool, KEY("c"), KEY("add 1"), 0, 8, &answer));
    CHECK(responses_are(&answer, layers, 2));
    ferrite_response_list_free(&answer);
    drop_pool(session, pool, "chain");

    /* A pool without plugins refuses invocations. */
    pool = new_pool(session, "plain", 0, NULL);
    REQUIRE(pool != NULL);
    CHECK(put_text(pool, "k", "v"));
    CHECK_STATUS(ferrite_invoke(pool, KEY("k"), KEY("get"), 0, 0, &answer), FERRITE_INVALID_ARGUMENT);
    drop_pool(session, pool, "plain");
    CHECK_OK(ferrite_session_close(session));
}

#define IN_FLIGHT 1000

/* Many operations in flight on one pool, finished by waiting and by polling. */
static void test_async_many_in_flight(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_pool(session, "async", 0, NULL);
    REQUIRE(pool != NULL);

    static ferrite_op *ops[IN_FLIGHT];
    char key[32], val[32];
    for (int i = 0; i < IN_FLIGHT; i++) {
        snprintf(key, sizeof key, "key-%04d", i);
        snprintf(val, sizeof val, "value-%d", i * 7);
        /* The library copies key and value: reusing the buffers at once is fine. */
        CHECK_OK(ferrite_put_async(pool, KEY(key), KEY(val), 0, &ops[i]));
    }
    for (int i = 0; i < IN_FLIGHT; i++) {
        CHECK_OK(ferrite_op_wait(ops[i], FERRITE_WAIT_FOREVER));
        CHECK_OK(ferrite_op_poll(ops[i])); /* the final status sticks */
        ferrite_buffer none = {0};
        CHECK_STATUS(ferrite_op_result_buffer(ops[i], &none), FERRITE_ERR_INVALID_ARGUMENT);
        ferrite_op_free(ops[i]);
    }
    uint64_t count = 0;
    CHECK_OK(ferrite_count(pool, &count));
    CHECK(count == IN_FLIGHT);

    for (int i = 0; i < IN_FLIGHT; i++) {
        snprintf(key, sizeof key, "key-%04d", i);
        CHECK_OK(ferrite_get_async(pool, KEY(key), &ops[i]));
    }
    /* Poll round after round until every get finished; the first round finds some pending. */
    int remaining = IN_FLIGHT, rounds = 0, pending_seen = 0;
    static int done[IN_FLIGHT];
    memset(done, 0, sizeof done);
    while (remaining > 0 && rounds < 100000) {
        rounds++;
        for (int i = 0; i < IN_FLIGHT; i++) {
            if (done[i]) continue;
            ferrite_status status = ferrite_op_poll(ops[i]);
            if (status == FERRITE_PENDING) {
                pending_seen++;
                continue;
            }
            CHECK_OK(status);
            ferrite_buffer value = {0};
            CHECK_OK(ferrite_op_result_buffer(ops[i], &value));
            snprintf(val, sizeof val, "value-%d", i * 7);
            CHECK(buffer_is(value, val));
            ferrite_buffer_free(&value);
            CHECK_STATUS(ferrite_op_result_buffer(ops[i], &value), FERRITE_ERR_INVALID_ARGUMENT);
            ferrite_op_free(ops[i]);
            done[i] = 1;
            remaining--;
        }
        if (remaining > 0) usleep(100);
    }
    CHECK(remaining == 0);
    printf("(%d polls found an operation pending) ", pending_seen);

    /* Failures are the operation's status, with the operation's message. */
    ferrite_op *op = NULL;
    CHECK_OK(ferrite_get_async(pool, KEY("missing"), &op));
    CHECK_STATUS(ferrite_op_wait(op, 10000), FERRITE_KEY_NOT_FOUND);
    CHECK(strstr(ferrite_last_error(), "key_not_found") != NULL);
    ferrite_buffer value = {0};
    CHECK_STATUS(ferrite_op_result_buffer(op, &value), FERRITE_KEY_NOT_FOUND);
    CHECK(value.data == NULL);
    ferrite_op_free(op);

    CHECK_OK(ferrite_erase_async(pool, KEY("key-0000"), &op));
    CHECK_OK(ferrite_op_wait(op, FERRITE_WAIT_FOREVER));
    ferrite_op_free(op);
    CHECK_OK(ferrite_erase_async(pool, KEY("key-0000"), &op));
    CHECK_STATUS(ferrite_op_wait(op, FERRITE_WAIT_FOREVER), FERRITE_KEY_NOT_FOUND);
    ferrite_op_free(op);

    CHECK_OK(ferrite_put_async(pool, KEY("k"), KEY("v"), FERRITE_PUT_CREATE_ONLY, &op));
    CHECK_OK(ferrite_op_wait(op, FERRITE_WAIT_FOREVER));
    ferrite_op_free(op);
    CHECK_OK(ferrite_put_async(pool, KEY("k"), KEY("v"), FERRITE_PUT_CREATE_ONLY, &op));
    CHECK_STATUS(ferrite_op_wait(op, FERRITE_WAIT_FOREVER), FERRITE_KEY_EXISTS);
    ferrite_op_free(op);

    /* A request refused locally is finished at once. */
    uint8_t *big = calloc(70 * 1024, 1);
    REQUIRE(big != NULL);
    CHECK_OK(ferrite_get_async(pool, big, 70 * 1024, &op));
    CHECK_STATUS(ferrite_op_poll(op), FERRITE_KEY_TOO_LARGE);
    ferrite_op_free(op);
    free(big);

    /* A wait that times out says pending; freeing a pending operation is allowed. */
    for (int i = 0; i < 50; i++) {
        CHECK_OK(ferrite_get_async(pool, KEY("key-0001"), &op));
        ferrite_status status = ferrite_op_wait(op, 0);
        CHECK(status == FERRITE_PENDING || status == FERRITE_OK);
        ferrite_op_free(op);
    }

    /* Bad submissions fail at once and hand out no operation. */
    op = (ferrite_op *)&op;
    CHECK_STATUS(ferrite_put_async(pool, NULL, 1, KEY("v"), 0, &op), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(op == NULL);
    CHECK_STATUS(ferrite_put_async(pool, KEY("k"), KEY("v"), 0x40, &op), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_put_async(NULL, KEY("k"), KEY("v"), 0, &op), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_put_async(pool, KEY("k"), KEY("v"), 0, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_get_async(NULL, KEY("k"), &op), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_get_async(pool, KEY("k"), NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_erase_async(NULL, KEY("k"), &op), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_erase_async(pool, NULL, 2, &op), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_op_poll(NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_op_wait(NULL, 0), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_op_result_buffer(NULL, &value), FERRITE_ERR_INVALID_ARGUMENT);
    ferrite_op_free(NULL);

    drop_pool(session, pool, "async");
    CHECK_OK(ferrite_session_close(session));
}

/* Operations in flight survive the closing of their pool and session, and still finish. */
static void test_ops_outlive_their_pool_and_session(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_pool(session, "outlive", 0, NULL);
    REQUIRE(pool != NULL);
    enum { N = 100 };
    ferrite_op *ops[N];
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "k%d", i);
        CHECK_OK(ferrite_put_async(pool, KEY(key), KEY("v"), 0, &ops[i]));
    }
    CHECK_OK(ferrite_pool_close(pool));
    CHECK_OK(ferrite_session_close(session));
    for (int i = 0; i < N; i++) {
        CHECK_OK(ferrite_op_wait(ops[i], FERRITE_WAIT_FOREVER));
        ferrite_op_free(ops[i]);
    }

    session = connect_plain();
    REQUIRE(session != NULL);
    char name[128];
    pool_name(name, sizeof name, "outlive");
    CHECK_OK(ferrite_pool_open(session, name, &pool));
    uint64_t count = 0;
    CHECK_OK(ferrite_count(pool, &count));
    CHECK(count == N);
    drop_pool(session, pool, "outlive");
    CHECK_OK(ferrite_session_close(session));
}

/* A pool stays usable after its session is closed: it holds its own connection. */
static void test_pool_outlives_session(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_pool(session, "orphan", 0, NULL);
    REQUIRE(pool != NULL);
    CHECK_OK(ferrite_session_close(session));
    CHECK(put_text(pool, "k", "v"));
    ferrite_buffer value = {0};
    CHECK_OK(ferrite_get(pool, KEY("k"), &value));
    CHECK(buffer_is(value, "v"));
    ferrite_buffer_free(&value);
    CHECK_OK(ferrite_pool_close(pool));

    session = connect_plain();
    REQUIRE(session != NULL);
    char name[128];
    pool_name(name, sizeof name, "orphan");
    CHECK_OK(ferrite_pool_delete(session, name));
    CHECK_OK(ferrite_session_close(session));
}

struct worker {
    ferrite_pool *pool;
    int index;
    int failures;
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    char key[32], val[32];
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof key, "t%d-%d", w->index, i);
        snprintf(val, sizeof val, "%d", i);
        if (ferrite_put(w->pool, KEY(key), KEY(val), 0) != FERRITE_OK) w->failures++;
        ferrite_buffer value = {0};
        if (ferrite_get(w->pool, KEY(key), &value) != FERRITE_OK || !buffer_is(value, val)) w->failures++;
        ferrite_buffer_free(&value);
    }
    /* This thread's failure must not show through another thread's ferrite_last_error. */
    if (ferrite_erase(w->pool, KEY("never-there")) != FERRITE_KEY_NOT_FOUND) w->failures++;
    if (strstr(ferrite_last_error(), "key_not_found") == NULL) w->failures++;
    return NULL;
}

/* One pool shared by threads; each thread keeps its own last error. */
static void test_threads_share_a_pool(void) {
    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    ferrite_pool *pool = new_pool(session, "threads", 0, NULL);
    REQUIRE(pool != NULL);
    CHECK_STATUS(ferrite_put(pool, NULL, 1, NULL, 0, 0), FERRITE_ERR_INVALID_ARGUMENT);
    char mine[256];
    snprintf(mine, sizeof mine, "%s", ferrite_last_error());

    enum { THREADS = 4 };
    pthread_t threads[THREADS];
    struct worker workers[THREADS];
    for (int t = 0; t < THREADS; t++) {
        workers[t] = (struct worker){pool, t, 0};
        REQUIRE(pthread_create(&threads[t], NULL, worker_main, &workers[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        CHECK(workers[t].failures == 0);
    }
    CHECK(strcmp(ferrite_last_error(), mine) == 0);
    uint64_t count = 0;
    CHECK_OK(ferrite_count(pool, &count));
    CHECK(count == THREADS * 200);
    drop_pool(session, pool, "threads");
    CHECK_OK(ferrite_session_close(session));
}

/* NULL where an object or out-parameter is required is refused, never a crash. */
static void test_null_arguments(void) {
    ferrite_pool *pool = NULL;
    ferrite_pool_info_list list = {0};
    ferrite_buffer buffer = {0};
    ferrite_key_list keys = {0};
    ferrite_response_list answer = {0};
    bool created;
    CHECK_STATUS(ferrite_pool_create(NULL, "p", 1 << 20, 0, 0, NULL, &pool), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "session") != NULL);
    CHECK_STATUS(ferrite_pool_open(NULL, "p", &pool), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_delete(NULL, "p"), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_list(NULL, &list), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_created(NULL, &created), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_put(NULL, KEY("k"), KEY("v"), 0), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_get(NULL, KEY("k"), &buffer), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_find(NULL, FERRITE_FIND_PREFIX, KEY("k"), &keys), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_invoke(NULL, KEY("k"), KEY("get"), 0, 0, &answer), FERRITE_ERR_INVALID_ARGUMENT);

    ferrite_session *session = connect_plain();
    REQUIRE(session != NULL);
    CHECK_STATUS(ferrite_pool_create(session, NULL, 1 << 20, 0, 0, NULL, &pool), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferrite_last_error(), "name") != NULL);
    CHECK_STATUS(ferrite_pool_create(session, "p", 1 << 20, 0, 0, NULL, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_create(session, "p", 1 << 20, 0, 0, "\xff", &pool), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_open(session, NULL, &pool), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_open(session, "p", NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_delete(session, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ferrite_pool_list(session, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    pool = new_pool(session, "nulls", 0, NULL);
    REQUIRE(pool != NULL);
    CHECK_STATUS(ferrite_pool_created(pool, NULL), FERRITE_ERR_INVALID_ARGUMENT);
    drop_pool(session, pool, "nulls");
    CHECK_OK(ferrite_session_close(session));
}

/* TLS with a client certificate, and users: the options a secured server needs. */
static void test_tls_and_users(void) {
    const char *tls_addr = getenv("FERRITE_TEST_TLS_ADDR");
    if (tls_addr == NULL || tls_addr[0] == '\0') {
        skipped = 1;
        return;
    }
    ferrite_options options = FERRITE_OPTIONS_INIT;
    options.tls_ca_file = getenv("FERRITE_TEST_CA");
    options.tls_client_cert_file = getenv("FERRITE_TEST_CLIENT_CERT");
    options.tls_client_key_file = getenv("FERRITE_TEST_CLIENT_KEY");
    options.user = getenv("FERRITE_TEST_USER");
    options.password = getenv("FERRITE_TEST_PASSWORD");
    REQUIRE(options.tls_ca_file && options.tls_client_cert_file && options.tls_client_key_file &&
            options.user && options.password);

    ferrite_session *session = NULL;
    CHECK_OK(ferrite_connect(tls_addr, &options, &session));
    REQUIRE(session != NULL);
    char name[128];
    snprintf(name, sizeof name, "secure-%ld", (long)getpid());
    ferrite_pool *pool = NULL;
    CHECK_OK(ferrite_pool_create(session, name, 1 << 20, 0, FERRITE_POOL_CREATE_ONLY, NULL, &pool));
    REQUIRE(pool != NULL);
    CHECK(put_text(pool, "k", "over tls"));
    ferrite_buffer value = {0};
    CHECK_OK(ferrite_get(pool, KEY("k"), &value));
    CHECK(buffer_is(value, "over tls"));
    ferrite_buffer_free(&value);
    CHECK_OK(ferrite_pool_close(pool));
    CHECK_OK(ferrite_pool_delete(session, name));
    /* The user's grants cover "secure*" only. */
    CHECK_STATUS(ferrite_pool_create(session, "elsewhere", 1 << 20, 0, 0, NULL, &pool),
                 FERRITE_PERMISSION_DENIED);
    CHECK_OK(ferrite_session_close(session));

    const char *password = options.password;
    options.password = "wrong password";
    CHECK_STATUS(ferrite_connect(tls_addr, &options, &session), FERRITE_AUTHENTICATION_FAILED);
    CHECK(session == NULL);
    options.password = password;

    /* Mutual TLS: without a client certificate the handshake is refused. */
    options.tls_client_cert_file = NULL;
    options.tls_client_key_file = NULL;
    ferrite_status status = ferrite_connect(tls_addr, &options, &session);
    CHECK(status == FERRITE_ERR_IO || status == FERRITE_ERR_CLOSED);
    CHECK(ferrite_last_error()[0] != '\0');
    CHECK(session == NULL);

    /* A client in clear is refused by a TLS server. */
    options = (ferrite_options)FERRITE_OPTIONS_INIT;
    options.connect_timeout_ms = 5000;
    status = ferrite_connect(tls_addr, &options, &session);
    CHECK(status != FERRITE_OK);
    CHECK(session == NULL);
}

/* ---------------------------------------------------------------- main */

struct test {
    const char *name;
    void (*run)(void);
};

static const struct test tests[] = {
    {"statuses_and_version", test_statuses_and_version},
    {"cluster_map", test_cluster_map},
    {"cluster_follows_leaders", test_cluster_follows_leaders},
    {"connect_errors", test_connect_errors},
    {"connect_with_options", test_connect_with_options},
    {"options_carry_their_size", test_options_carry_their_size},
    {"pool_lifecycle", test_pool_lifecycle},
    {"put_get", test_put_get},
    {"get_into", test_get_into},
    {"large_values", test_large_values},
    {"offsets", test_offsets},
    {"erase_and_count", test_erase_and_count},
    {"find", test_find},
    {"configure_index", test_configure_index},
    {"attributes_and_statistics", test_attributes_and_statistics},
    {"invoke", test_invoke},
    {"async_many_in_flight", test_async_many_in_flight},
    {"ops_outlive_their_pool_and_session", test_ops_outlive_their_pool_and_session},
    {"pool_outlives_session", test_pool_outlives_session},
    {"threads_share_a_pool", test_threads_share_a_pool},
    {"null_arguments", test_null_arguments},
    {"tls_and_users", test_tls_and_users},
};

int main(void) {
    addr = getenv("FERRITE_TEST_ADDR");
    if (addr == NULL || addr[0] == '\0') {
        fprintf(stderr, "set FERRITE_TEST_ADDR to a Ferrite server's native address (host:port)\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    int passed = 0, failed = 0, skips = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        printf("test %s ... ", tests[i].name);
        check_failures = 0;
        skipped = 0;
        tests[i].run();
        if (check_failures > 0) {
            printf("FAILED (%d checks)\n", check_failures);
            failed++;
        } else if (skipped) {
            printf("skipped\n");
            skips++;
        } else {
            printf("ok\n");
            passed++;
        }
    }
    if (skips > 0) {
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skips);
    } else {
        printf("%d passed, %d failed\n", passed, failed);
    }
    return failed > 0 ? 1 : 0;
}
