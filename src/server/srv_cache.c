/* srv_cache.c — the server's shared prompt cache: KV prefixes kept for every slot, in RAM (LRU under a byte
 * budget) and, with --prompt-cache DIR, on disk so that a restarted server answers a known prefix warm.
 *
 * A prompt is cut into blocks of PC_BLOCK tokens; block i's key is a hash chain over the model's identity and
 * every token up to the end of block i, so one key names one whole prefix. An entry holds one block's KV
 * (hearth_kv_read: every layer's K and V for those positions) and its tokens, checked on every hit. Disk
 * entries are DIR/<key>.kv: a header (magic, version, key, block size, bytes per token, model identity), the
 * tokens, the KV bytes and a checksum over all of it, written to a temp file and renamed into place. One that
 * fails any check is reported in one line, removed and never used. Restored KV is the KV that was computed,
 * byte for byte, so cached, restored and uncached replies are identical. The engine thread alone calls it.
 *
 * A hybrid model (recurrent layers beside attention: Qwen3.5) needs the recurrent state where a restored
 * prefix ends, and a state is the size of many blocks of KV: the entry of a prompt's last whole block also
 * keeps the state checkpoint at its end (hearth_state_read), and a prefix restores up to the deepest block of
 * its chain that has one. With a directory the checkpoint is also DIR/<key>.st, checked like a .kv entry, so a
 * restarted server restores a hybrid model's prefix too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "server/srv_internal.h"

#define PC_BLOCK 64
#define PC_MAGIC 0x43505448u   /* "HTPC" */
#define PC_MAGIC_STATE 0x53505448u   /* "HTPS" */
#define PC_VERSION 1u

typedef struct pc_entry {
    uint64_t key;
    hearth_token toks[PC_BLOCK];
    uint8_t *kv;
    uint8_t *state;            /* hybrid models: the recurrent state after this block, or NULL */
    struct pc_entry *next_hash, *prev_lru, *next_lru;
} pc_entry;

struct srv_cache {
    uint64_t identity;         /* the model and cache layout the entries belong to */
    size_t token_bytes, state_bytes, budget, used;
    char *dir;
    pc_entry **buckets;
    size_t n_buckets, n_entries;
    pc_entry *lru_head, *lru_tail;   /* head = most recently used */
    long long hits, misses, restored_tokens, disk_loads, disk_rejects;
};

typedef struct {
    uint32_t magic, version;
    uint64_t key;
    uint32_t block, pad;
    uint64_t token_bytes, identity;
} pc_header;

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31, h *= 0xbf58476d1ce4e5b9ull, h ^= h >> 27;
    return h;
}

/* A checksum over bytes, eight at a time (the KV of a block is megabytes; this runs at memory speed). */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

srv_cache *pcache_new(const hearth_ctx *ctx, size_t budget, const char *dir, hearth_err *err) {
    uint8_t probe[1];
    if (!budget || hearth_kv_read(ctx, 0, 0, 0, probe)) return NULL;   /* off, or KV that cannot be moved (rings) */
    srv_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return herr(err, "out of memory"), NULL;
    hearth_model *m = hearth_ctx_model(ctx);
    hearth_model_info in;
    hearth_model_get_info(m, &in);
    char id[512];
    hearth_cache_type kt, vt;   /* same bytes a token do not make the same layout (f16 / bf16) */
    hearth_ctx_cache_types(ctx, &kt, &vt);
    snprintf(id, sizeof id, "%s|%s|%llu|%llu|%d|%d|%d|%d|%zu|%zu|%llx|%d|%d", in.arch, in.name ? in.name : "",
             (unsigned long long)in.file_bytes, (unsigned long long)in.n_params, in.n_layer, in.n_embd, in.n_head_kv,
             in.head_dim, hearth_kv_token_bytes(ctx), hearth_state_bytes(ctx), (unsigned long long)hearth_ctx_lora_id(ctx),
             (int)kt, (int)vt);
    pc->identity = fnv(0xcbf29ce484222325ull, id, strlen(id));
    pc->token_bytes = hearth_kv_token_bytes(ctx);
    pc->state_bytes = hearth_state_bytes(ctx);
    pc->budget = budget;
    pc->n_buckets = 1024;
    pc->buckets = calloc(pc->n_buckets, sizeof *pc->buckets);
    if (dir && !(pc->dir = strdup(dir))) pc->buckets = (free(pc->buckets), NULL);
    if (!pc->buckets) { free(pc->dir); free(pc); return herr(err, "out of memory"), NULL; }
    if (dir && mkdir(dir, 0755) && errno != EEXIST) {
        herr(err, "--prompt-cache %s: %s", dir, strerror(errno));
        pcache_free(pc);
        return NULL;
    }
    return pc;
}

void pcache_free(srv_cache *pc) {
    if (!pc) return;
    for (pc_entry *e = pc->lru_head, *n; e; e = n) { n = e->next_lru; free(e->kv); free(e->state); free(e); }
    free(pc->buckets);
    free(pc->dir);
    free(pc);
}

void pcache_stats(const srv_cache *pc, long long *hits, long long *misses, long long *tokens, long long *entries) {
    *hits = pc ? pc->hits : 0, *misses = pc ? pc->misses : 0, *tokens = pc ? pc->restored_tokens : 0;
    *entries = pc ? (long long)pc->n_entries : 0;
}

/* ---- RAM ---- */

static pc_entry *find(const srv_cache *pc, uint64_t key, const hearth_token *toks) {
    for (pc_entry *e = pc->buckets[key & (pc->n_buckets - 1)]; e; e = e->next_hash)
        if (e->key == key && !memcmp(e->toks, toks, sizeof e->toks)) return e;
    return NULL;
}

static void lru_unlink(srv_cache *pc, pc_entry *e) {
    if (e->prev_lru) e->prev_lru->next_lru = e->next_lru; else pc->lru_head = e->next_lru;
    if (e->next_lru) e->next_lru->prev_lru = e->prev_lru; else pc->lru_tail = e->prev_lru;
    e->prev_lru = e->next_lru = NULL;
}

static void lru_front(srv_cache *pc, pc_entry *e) {
    e->next_lru = pc->lru_head;
    if (pc->lru_head) pc->lru_head->prev_lru = e;
    pc->lru_head = e;
    if (!pc->lru_tail) pc->lru_tail = e;
}

static void drop(srv_cache *pc, pc_entry *e) {
    pc_entry **p = &pc->buckets[e->key & (pc->n_buckets - 1)];
    while (*p != e) p = &(*p)->next_hash;
    *p = e->next_hash;
    lru_unlink(pc, e);
    pc->used -= pc->token_bytes * PC_BLOCK + (e->state ? pc->state_bytes : 0);
    pc->n_entries--;
    free(e->kv);
    free(e->state);
    free(e);
}

static void grow(srv_cache *pc) {
    size_t n = pc->n_buckets * 2;
    pc_entry **b = calloc(n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < pc->n_buckets; i++)
        for (pc_entry *e = pc->buckets[i], *nx; e; e = nx) {
            nx = e->next_hash;
            e->next_hash = b[e->key & (n - 1)];
            b[e->key & (n - 1)] = e;
        }
    free(pc->buckets);
    pc->buckets = b, pc->n_buckets = n;
}

/* Takes kv (malloc'd, one block). The least recently used entries go when the budget is passed. */
static pc_entry *insert(srv_cache *pc, uint64_t key, const hearth_token *toks, uint8_t *kv) {
    size_t bytes = pc->token_bytes * PC_BLOCK;
    if (bytes > pc->budget) { free(kv); return NULL; }
    while (pc->used + bytes > pc->budget && pc->lru_tail) drop(pc, pc->lru_tail);
    pc_entry *e = calloc(1, sizeof *e);
    if (!e) { free(kv); return NULL; }
    e->key = key;
    memcpy(e->toks, toks, sizeof e->toks);
    e->kv = kv;
    if (pc->n_entries + 1 > pc->n_buckets) grow(pc);
    e->next_hash = pc->buckets[key & (pc->n_buckets - 1)];
    pc->buckets[key & (pc->n_buckets - 1)] = e;
    lru_front(pc, e);
    pc->used += bytes;
    pc->n_entries++;
    return e;
}

/* ---- disk ---- */

/* Two kinds of file: a block's KV (DIR/<key>.kv) and, for a hybrid model, the recurrent state at a block's end
 * (DIR/<key>.st). Both: a header, the block's tokens, the payload (header.token_bytes: the KV bytes of one token,
 * or the state's bytes) and a checksum over all of it. */
typedef struct { const char *ext; uint32_t magic; } pc_kind;
static const pc_kind KV_FILE = { "kv", PC_MAGIC }, STATE_FILE = { "st", PC_MAGIC_STATE };

static size_t payload_bytes(const srv_cache *pc, const pc_kind *k) {
    return k == &STATE_FILE ? pc->state_bytes : pc->token_bytes * PC_BLOCK;
}

static void entry_path(const srv_cache *pc, const pc_kind *k, uint64_t key, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%016llx.%s", pc->dir, (unsigned long long)key, k->ext);
}

static void disk_write(srv_cache *pc, const pc_kind *k, uint64_t key, const hearth_token *toks, const uint8_t *data) {
    char path[4096];
    entry_path(pc, k, key, path, sizeof path);
    struct stat st;
    if (!stat(path, &st)) return;   /* already there */
    const size_t n = payload_bytes(pc, k);
    pc_header h = { k->magic, PC_VERSION, key, PC_BLOCK, 0, k == &STATE_FILE ? n : pc->token_bytes, pc->identity };
    uint64_t sum = fnv(fnv(fnv(0xcbf29ce484222325ull, &h, sizeof h), toks, sizeof(hearth_token) * PC_BLOCK), data, n);
    ht_afile f;
    hearth_err err;
    if (ht_afile_open(&f, path, &err)) { fprintf(stderr, "warning: prompt cache: %s\n", err.msg); return; }
    FILE *fp = fdopen(dup(f.fd), "wb");
    bool ok = fp && fwrite(&h, sizeof h, 1, fp) == 1 && fwrite(toks, sizeof(hearth_token), PC_BLOCK, fp) == PC_BLOCK &&
              fwrite(data, 1, n, fp) == n && fwrite(&sum, sizeof sum, 1, fp) == 1;
    if (fp && fclose(fp)) ok = false;
    if (!ok) { ht_afile_abort(&f); fprintf(stderr, "warning: prompt cache: cannot write %s\n", path); return; }
    if (ht_afile_commit(&f, &err)) fprintf(stderr, "warning: prompt cache: %s\n", err.msg);
}

/* The payload of key's file of kind k, checked whole (malloc'd); NULL if absent or for other tokens (a hash
 * collision). A bad one is reported once and removed. */
static uint8_t *disk_read(srv_cache *pc, const pc_kind *k, uint64_t key, const hearth_token *toks) {
    if (!pc->dir) return NULL;
    char path[4096];
    entry_path(pc, k, key, path, sizeof path);
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    const size_t n = payload_bytes(pc, k);
    pc_header h;
    hearth_token ft[PC_BLOCK];
    uint8_t *data = malloc(n);
    uint64_t sum = 0;
    const char *why = NULL;
    if (!data) why = "out of memory";
    else if (fread(&h, sizeof h, 1, fp) != 1) why = "truncated header";
    else if (h.magic != k->magic || h.version != PC_VERSION) why = "not a hearth prompt-cache entry";
    else if (h.identity != pc->identity || h.block != PC_BLOCK || h.token_bytes != (k == &STATE_FILE ? n : pc->token_bytes))
        why = "made for another model or cache layout";
    else if (h.key != key) why = "its key does not match its name";
    else if (fread(ft, sizeof(hearth_token), PC_BLOCK, fp) != PC_BLOCK || fread(data, 1, n, fp) != n || fread(&sum, sizeof sum, 1, fp) != 1)
        why = "truncated";
    else if (fgetc(fp) != EOF) why = "longer than an entry";
    else if (sum != fnv(fnv(fnv(0xcbf29ce484222325ull, &h, sizeof h), ft, sizeof ft), data, n)) why = "checksum mismatch";
    fclose(fp);
    if (why) {
        free(data);
        if (strcmp(why, "out of memory")) {
            fprintf(stderr, "warning: prompt cache: skipping %s: %s\n", path, why);
            pc->disk_rejects++;
            remove(path);
        }
        return NULL;
    }
    if (memcmp(ft, toks, sizeof ft)) { free(data); return NULL; }
    pc->disk_loads++;
    return data;
}

static pc_entry *disk_load(srv_cache *pc, uint64_t key, const hearth_token *toks) {
    uint8_t *kv = disk_read(pc, &KV_FILE, key, toks);
    return kv ? insert(pc, key, toks, kv) : NULL;
}

/* st (malloc'd: a state checkpoint) onto entry e, within the budget; false if it does not fit. */
static bool attach_state(srv_cache *pc, pc_entry *e, uint8_t *st) {
    if (pc->state_bytes + pc->token_bytes * PC_BLOCK > pc->budget) { free(st); return false; }
    lru_unlink(pc, e);   /* the entry itself stays while older ones make room */
    while (pc->used + pc->state_bytes > pc->budget && pc->lru_tail) drop(pc, pc->lru_tail);
    lru_front(pc, e);
    e->state = st;
    pc->used += pc->state_bytes;
    return true;
}

/* ---- what the engine calls ---- */

/* The key chain of prompt blocks: key[i] covers tokens [0, (i + 1) * PC_BLOCK). */
static uint64_t next_key(const srv_cache *pc, uint64_t prev, const hearth_token *block) {
    uint64_t h = prev ? prev : pc->identity;
    for (int i = 0; i < PC_BLOCK; i++) h = mix(h, (uint64_t)(uint32_t)block[i]);
    return h;
}

int pcache_restore(srv_cache *pc, hearth_ctx *ctx, int seq, const hearth_token *toks, int n, int have, uint64_t salt) {
    if (!pc || n <= PC_BLOCK) return have;
    int n_blocks = (n - 1) / PC_BLOCK;   /* the last prompt token is always decoded, for its logits */
    uint64_t key = salt ? mix(pc->identity, salt) : 0;   /* KV computed under other adapters is another chain */
    pc_entry *chain[4096];
    int k = 0;
    for (; k < n_blocks && k < 4096; k++) {
        key = next_key(pc, key, toks + (size_t)k * PC_BLOCK);
        pc_entry *e = find(pc, key, toks + (size_t)k * PC_BLOCK);
        if (!e) e = disk_load(pc, key, toks + (size_t)k * PC_BLOCK);
        if (!e) break;
        lru_unlink(pc, e);
        lru_front(pc, e);
        chain[k] = e;
    }
    if (pc->state_bytes)   /* a hybrid model restores up to a block that ends at a state checkpoint */
        for (; k > 0 && !chain[k - 1]->state; k--) {   /* (making room never drops the chain: it is the LRU's front) */
            size_t chain_bytes = pc->state_bytes;
            for (int i = 0; i < k; i++) chain_bytes += pc->token_bytes * PC_BLOCK + (chain[i]->state ? pc->state_bytes : 0);
            uint8_t *st = chain_bytes <= pc->budget ? disk_read(pc, &STATE_FILE, chain[k - 1]->key, chain[k - 1]->toks) : NULL;
            if (st && attach_state(pc, chain[k - 1], st)) break;
        }
    if (k * PC_BLOCK <= have) { if (have < PC_BLOCK * n_blocks) pc->misses++; return have; }
    int from = have / PC_BLOCK;   /* whole blocks the slot already holds stay */
    hearth_seq_truncate(ctx, seq, from * PC_BLOCK);
    if (hearth_seq_len(ctx, seq) != from * PC_BLOCK) from = 0, hearth_seq_truncate(ctx, seq, 0);
    for (int i = from; i < k; i++)
        if (hearth_kv_write(ctx, seq, i * PC_BLOCK, PC_BLOCK, chain[i]->kv)) { k = i; break; }
    if (pc->state_bytes && (hearth_seq_len(ctx, seq) != k * PC_BLOCK ||
                            hearth_state_write(ctx, seq, k * PC_BLOCK, chain[k - 1]->state))) {
        hearth_seq_truncate(ctx, seq, 0);   /* (not reached: every block and its checkpoint are whole) */
        return 0;
    }
    pc->hits++;
    pc->restored_tokens += (long long)(k * PC_BLOCK - have > 0 ? k * PC_BLOCK - have : 0);
    return hearth_seq_len(ctx, seq);
}

/* The recurrent state at the end of block n_blocks - 1 (key), onto its entry (and to disk), within the budget. */
static void store_state(srv_cache *pc, const hearth_ctx *ctx, int seq, uint64_t key, const hearth_token *block, int n_blocks) {
    pc_entry *e = find(pc, key, block);
    if (!e || e->state) return;
    uint8_t *st = malloc(pc->state_bytes);
    if (!st || hearth_state_read(ctx, seq, n_blocks * PC_BLOCK, st)) { free(st); return; }
    if (pc->dir) disk_write(pc, &STATE_FILE, key, block, st);
    attach_state(pc, e, st);
}

void pcache_store(srv_cache *pc, const hearth_ctx *ctx, int seq, const hearth_token *toks, int n, uint64_t salt) {
    if (!pc) return;
    int n_blocks = HT_MIN(n, hearth_seq_len(ctx, seq)) / PC_BLOCK;
    uint64_t key = salt ? mix(pc->identity, salt) : 0;
    for (int i = 0; i < n_blocks && i < 4096; i++) {
        const hearth_token *b = toks + (size_t)i * PC_BLOCK;
        key = next_key(pc, key, b);
        pc_entry *e = find(pc, key, b);
        if (e) { lru_unlink(pc, e); lru_front(pc, e); continue; }
        uint8_t *kv = malloc(pc->token_bytes * PC_BLOCK);
        if (!kv || hearth_kv_read(ctx, seq, i * PC_BLOCK, PC_BLOCK, kv)) { free(kv); return; }
        if (pc->dir) disk_write(pc, &KV_FILE, key, b, kv);
        if (!insert(pc, key, b, kv)) return;
    }
    if (pc->state_bytes && n_blocks > 0 && n_blocks <= 4096) store_state(pc, ctx, seq, key, toks + (size_t)(n_blocks - 1) * PC_BLOCK, n_blocks);
}
