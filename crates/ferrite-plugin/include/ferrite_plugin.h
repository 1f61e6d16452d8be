/*
 * ferrite_plugin.h: the stable C ABI of Ferrite's Active Data Object plugins.
 *
 * A plugin is a shared library that exports one function, `ferrite_plugin_entry`, returning a
 * pointer to a static `ferrite_plugin_v1` table. The `ferrite-ado` host process (one per pool that
 * has plugins) loads the library with dlopen, checks `abi_version`, calls `launch` once, and then
 * `do_work` for every invocation aimed at the pool, on one thread. Rust plugins implement the
 * `ferrite_plugin::Plugin` trait and export it with `ferrite_plugin::export_plugin!`; C and C++
 * plugins fill the table themselves.
 *
 * Compatibility: this header describes ABI version 1. A later version may append fields to the
 * end of a struct (whose `struct_size` then grows) and callbacks to the end of the callback
 * table; it never moves or changes an existing one. A host refuses a plugin whose `abi_version`
 * it does not know.
 *
 * Crash consistency: a plugin sees its target value (and any memory it allocated through a
 * callback) as bytes in pool memory. Before it changes any of them it must call
 * `declare_write` for the range; the host copies the range's old bytes aside. When `do_work`
 * returns FERRITE_OK every declared range is logged as one transaction, exactly like a put;
 * when it fails, or the host dies, every declared range gets its old bytes back. A write the
 * plugin did not declare is a bug that the host's checking mode reports.
 *
 * All integers are native-endian (the host and the plugin share a machine). Every pointer the
 * host passes is valid until the call it was passed to returns, unless said otherwise.
 */
#ifndef FERRITE_PLUGIN_H
#define FERRITE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRITE_PLUGIN_ABI_VERSION 1u

/* Status codes: what `do_work` and every callback return. Negative is an error. */
#define FERRITE_OK 0
#define FERRITE_ERR_FAILED (-1)      /* the operation failed; the plugin's own reason */
#define FERRITE_ERR_INVALID (-2)     /* an argument is out of range (a pointer outside pool memory, ...) */
#define FERRITE_ERR_NOT_FOUND (-3)   /* no such key */
#define FERRITE_ERR_EXISTS (-4)      /* the key exists already */
#define FERRITE_ERR_NO_SPACE (-5)    /* the pool (or the log) has no room */
#define FERRITE_ERR_LOCKED (-6)      /* another call holds the key's lock */
#define FERRITE_ERR_UNSUPPORTED (-7) /* the host does not offer this callback */

/* Bytes owned by someone else, read-only. */
typedef struct ferrite_bytes {
    const uint8_t *data;
    size_t len;
} ferrite_bytes;

/* ferrite_work.flags */
#define FERRITE_WORK_NEW_KEY (1u << 0)   /* the target was created for this call (create-on-demand) */
#define FERRITE_WORK_READ_ONLY (1u << 1) /* the caller asked for read-only: declare_write fails */
#define FERRITE_WORK_DETACHED (1u << 2)  /* invoke_put_ado with a detached value: see `detached` */
#define FERRITE_WORK_SIGNAL (1u << 3)    /* a post-put/get/erase signal; the payload says which */
#define FERRITE_WORK_POOL (1u << 4)      /* a key-less invocation: the target is the pool itself */

/* One invocation, as `do_work` receives it. */
typedef struct ferrite_work {
    uint32_t struct_size; /* sizeof(ferrite_work) of the host's ABI version */
    uint32_t flags;       /* FERRITE_WORK_* */
    uint64_t pool_id;
    ferrite_bytes key;    /* empty with FERRITE_WORK_POOL */
    uint8_t *value;       /* the target value in pool memory (NULL and 0 with FERRITE_WORK_POOL) */
    size_t value_len;
    uint64_t value_offset; /* the value's position in pool memory */
    ferrite_bytes payload; /* the client's request bytes */
    uint8_t *detached;     /* FERRITE_WORK_DETACHED: the value put into unattached pool memory */
    size_t detached_len;
    uint64_t detached_offset;
    uint32_t layer; /* this plugin's position in the pool's chain, from 0 */
    uint32_t reserved;
} ferrite_work;

/* A key-value pair a callback hands out. `value` points into pool memory. */
typedef struct ferrite_pair {
    ferrite_bytes key;
    uint8_t *value;
    size_t value_len;
    uint64_t value_offset;
    uint64_t write_time_ns; /* when the pair was last written, nanoseconds since the Unix epoch */
} ferrite_pair;

/* What `pool_info` reports. */
typedef struct ferrite_pool_info {
    uint64_t pool_id;
    uint64_t size_bytes;   /* the pool's capacity */
    uint64_t used_bytes;   /* charged against the capacity */
    uint64_t objects;      /* key-value pairs */
    uint64_t region_bytes; /* length of the pool memory mapping */
} ferrite_pool_info;

/* `iterate` calls this once per pair; returning non-zero stops the walk. */
typedef int (*ferrite_pair_fn)(void *context, const ferrite_pair *pair);

/* The host's side of a call: opaque to the plugin, passed back to every callback. */
typedef struct ferrite_host ferrite_host;

/* Log levels for the `log` callback. */
#define FERRITE_LOG_ERROR 1
#define FERRITE_LOG_WARN 2
#define FERRITE_LOG_INFO 3
#define FERRITE_LOG_DEBUG 4

/*
 * What the host offers a plugin (MCAS Table 4). Callbacks that change the pool's index (create,
 * erase, resize, allocate, free) are carried out by the shard and become part of the call's
 * transaction: undone if `do_work` fails. Keys a call creates or opens are locked until the call
 * returns, unless it unlocks them.
 */
typedef struct ferrite_callbacks {
    uint32_t struct_size; /* sizeof(ferrite_callbacks) of the host's ABI version */
    uint32_t reserved;

    /* Declares that `len` bytes at `addr` (inside the target value, the value of a key this call
     * created or opened for writing, or memory this call allocated) are about to change; the
     * host keeps their old bytes. FERRITE_ERR_INVALID for a range outside them,
     * FERRITE_ERR_INVALID too for a read-only call. */
    int (*declare_write)(ferrite_host *host, const void *addr, size_t len);
    /* Appends one buffer to the call's response (copied; tagged with the plugin's layer). */
    int (*respond)(ferrite_host *host, const uint8_t *data, size_t len);

    /* Creates `key` with a zeroed value of `value_len` bytes, locked for this call. */
    int (*create_key)(ferrite_host *host, const uint8_t *key, size_t key_len, size_t value_len, ferrite_pair *out);
    /* Opens an existing key, locked for this call (a write lock unless `read_only`). */
    int (*open_key)(ferrite_host *host, const uint8_t *key, size_t key_len, int read_only, ferrite_pair *out);
    /* Erases a key (not the call's target). */
    int (*erase_key)(ferrite_host *host, const uint8_t *key, size_t key_len);
    /* Resizes a locked key's value to `new_len` bytes (kept up to the shorter length, zeros
     * after); `out` gets its new place. The target's old `value` pointer is invalid after. */
    int (*resize_value)(ferrite_host *host, const uint8_t *key, size_t key_len, size_t new_len, ferrite_pair *out);
    /* Allocates `len` bytes of pool memory aligned to `align` (a power of two up to 4096);
     * `*out` and `*offset` get its address and pool offset. It is freed again if the call fails. */
    int (*allocate_memory)(ferrite_host *host, size_t len, size_t align, uint8_t **out, uint64_t *offset);
    /* Frees memory an earlier allocate_memory returned. */
    int (*free_memory)(ferrite_host *host, uint8_t *addr, size_t len);
    /* Calls `visit` for each pair written between `since_ns` and `until_ns` (0 and UINT64_MAX:
     * every pair). Pairs are not locked; their bytes may be read only during the visit. */
    int (*iterate)(ferrite_host *host, uint64_t since_ns, uint64_t until_ns, ferrite_pair_fn visit, void *context);
    /* Fills `*pairs` with an array of up to `max` pairs written between `since_ns` and
     * `until_ns`, and `*count` with how many; the array belongs to the host and lives until
     * `do_work` returns. */
    int (*get_reference_vector)(ferrite_host *host, uint64_t since_ns, uint64_t until_ns, size_t max,
                                const ferrite_pair **pairs, size_t *count);
    /* Finds the first key at or after `*position` that matches `expression` (the find syntax
     * of `ferrite find`: "prefix:", "regex:", "next:", or an exact key) through the pool's
     * secondary index (or a walk of the table if it has none). On FERRITE_OK `*key` holds it
     * (valid until do_work returns) and `*position` the place to resume after it;
     * FERRITE_ERR_NOT_FOUND at the end. Start with `*position` = 0. */
    int (*find_key)(ferrite_host *host, const char *expression, size_t expression_len, uint64_t *position,
                    ferrite_bytes *key);
    /* Fills `*info` with the pool's figures. */
    int (*pool_info)(ferrite_host *host, ferrite_pool_info *info);
    /* Releases a lock this call took (create_key / open_key) before the call returns. */
    int (*unlock)(ferrite_host *host, const uint8_t *key, size_t key_len);
    /* Writes a line to the server's log, tagged with the pool and the plugin. */
    void (*log)(ferrite_host *host, int level, const char *message, size_t len);
} ferrite_callbacks;

/* Pool events (ferrite_plugin_v1.pool_event). */
#define FERRITE_EVENT_OPEN 1   /* the host attached to the pool */
#define FERRITE_EVENT_CLOSE 2  /* the last session closed the pool; the host stops after */
#define FERRITE_EVENT_ERASE 3  /* a key was erased outside any call (`key` says which) */
#define FERRITE_EVENT_RESIZE 4 /* a value was resized outside any call */
#define FERRITE_EVENT_DELETE 5 /* the pool is being deleted */

/* The table a plugin exports. */
typedef struct ferrite_plugin_v1 {
    uint32_t abi_version; /* FERRITE_PLUGIN_ABI_VERSION */
    uint32_t struct_size; /* sizeof(ferrite_plugin_v1) */
    const char *name;     /* NUL-terminated; the name shown in logs and errors */

    /* Called once when the host loads the plugin, before any other entry. `config` is the
     * plugin's configuration from the server (empty if none). Returns the plugin's state, passed
     * to every later call (may be NULL); `*status` set to a negative code refuses to start. */
    void *(*launch)(const ferrite_callbacks *callbacks, ferrite_host *host, ferrite_bytes config, int *status);
    /* Handles one invocation. Returns FERRITE_OK to commit every declared write, or a negative
     * code to undo them; buffers passed to `respond` reach the client either way. */
    int (*do_work)(void *state, const ferrite_work *work, const ferrite_callbacks *callbacks, ferrite_host *host);
    /* Told of a pool event (FERRITE_EVENT_*); `key` is empty unless the event names one. May be NULL. */
    void (*pool_event)(void *state, uint32_t event, ferrite_bytes key, const ferrite_callbacks *callbacks,
                       ferrite_host *host);
    /* Called once before the host unloads the plugin. May be NULL. */
    void (*shutdown)(void *state);
} ferrite_plugin_v1;

/* The one symbol a plugin exports. */
const ferrite_plugin_v1 *ferrite_plugin_entry(void);

#ifdef __cplusplus
}
#endif

#endif /* FERRITE_PLUGIN_H */
