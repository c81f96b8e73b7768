/* threads.c — persistent worker pool with a spin-then-sleep wait and shares claimed, not assigned.
 *
 * pool_run() publishes (fn, arg), opens the job's shares 1..n-1 for claiming and bumps a generation counter;
 * workers spin on the counter for a short while (a decode step issues jobs back to back, so waking is then
 * nearly free), and fall back to a condition variable when idle for longer. The caller runs share 0, then
 * claims whatever shares no worker has taken yet, and spins until every claimed share is done. So a worker
 * that is asleep, or descheduled on a busy machine, delays a job only if it already took a share: the caller
 * does the rest itself instead of waiting for it to wake. A claim is one CAS on a word holding the job's
 * generation and the next share index, so a late worker can never claim a share of a later job with an
 * earlier job's function. Sequentially consistent atomics make the sleep/wake handshake race-free: a worker
 * re-checks the generation under the mutex after announcing itself as a sleeper. */
#include "compute/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 50000

/* Workers spin on the first line (gen, stop), which a job start writes once; the job's fields and the
 * completion count live on their own lines, so claiming and finishing shares does not disturb the spinners. */
struct ht_pool {
    _Alignas(64) atomic_uint gen;   /* job generation: workers wake when it changes */
    atomic_int stop;
    atomic_int sleepers;
    int n;
    bool serial;                    /* pool_serial: set and read by the caller only */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Alignas(64) _Atomic(ht_job_fn) fn;
    _Atomic(void *) arg;
    _Atomic uint64_t claim;         /* gen << 32 | next unclaimed share */
    _Alignas(64) atomic_int done;   /* shares of the current job finished */
};

typedef struct { ht_pool *p; int ith; } worker_arg;

/* Claims and runs shares of job generation g until none is left. A successful claim proves job g is still
 * open, so fn/arg (read after the generation, before the claim) are job g's: a later job's are written only
 * after every share of g was claimed and done. */
static void run_shares(ht_pool *p, unsigned g, ht_job_fn fn, void *arg) {
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    while ((unsigned)(c >> 32) == g && (int)(uint32_t)c < p->n) {
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire))
            continue;   /* c reloaded */
        fn(arg, (int)(uint32_t)c, p->n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

/* Waits for a generation other than seen (or stop): spins, then sleeps on the condition variable. */
static void wait_job(ht_pool *p, unsigned seen) {
    for (int spins = 0; spins < SPIN_ITERS; spins++) {
        if (atomic_load(&p->gen) != seen || atomic_load(&p->stop)) return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *v) {
    worker_arg wa = *(worker_arg *)v;
    free(v);
    ht_pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        wait_job(p, seen);
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->gen);
        /* read after the generation: fn/arg are this job's or a later one's, and a later one's claim check fails */
        run_shares(p, seen, atomic_load_explicit(&p->fn, memory_order_relaxed), atomic_load_explicit(&p->arg, memory_order_relaxed));
    }
    return NULL;
}

ht_pool *pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    ht_pool *p = aligned_alloc(64, (sizeof(ht_pool) + 63) / 64 * 64);
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n = i; break; }
        wa->p = p; wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) { free(wa); p->n = i; break; }
    }
    return p;
}

void pool_free(ht_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int pool_size(const ht_pool *p) { return p->n; }

void pool_serial(ht_pool *p, bool on) { p->serial = on; }

void pool_run(ht_pool *p, ht_job_fn fn, void *arg) {
    if (p->n == 1 || p->serial) { fn(arg, 0, 1); return; }
    unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->claim, (uint64_t)g << 32 | 1u, memory_order_release);   /* share 0 is the caller's */
    atomic_store(&p->gen, g);   /* seq_cst: pairs with the sleepers check below */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->n);
    atomic_fetch_add_explicit(&p->done, 1, memory_order_relaxed);
    run_shares(p, g, fn, arg);
    /* spin while workers finish the shares they took; yield if that takes long (an oversubscribed machine) */
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < p->n; spins++) {
        if (spins < SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
}

void pool_wait_count(const atomic_int *count, int n) {
    for (int spins = 0; atomic_load_explicit(count, memory_order_acquire) < n; spins++) {
        if (spins < SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
}

typedef struct { void (*fn)(const void *arg, int i0, int i1); const void *arg; int n; } share_args;

static void share_job(void *arg, int ith, int nth) {
    const share_args *j = arg;
    const int per = (j->n + nth - 1) / nth;
    const int i0 = ith * per < j->n ? ith * per : j->n;
    const int i1 = j->n - i0 < per ? j->n : i0 + per;
    if (i1 > i0) j->fn(j->arg, i0, i1);
}

void pool_share(ht_pool *p, int n, void (*fn)(const void *arg, int i0, int i1), const void *arg) {
    if (n < 2) { fn(arg, 0, n); return; }
    share_args j = { fn, arg, n };
    pool_run(p, share_job, &j);
}
