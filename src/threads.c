/* threads.c — persistent worker pool with a spin-then-sleep wait.
 *
 * pool_run() publishes (fn, arg) and bumps a generation counter; workers spin on the counter for a
 * short while (a decode step issues jobs back to back, so waking is then nearly free), and fall back to
 * a condition variable when idle for longer. The caller runs share 0 itself and spins until the others
 * report done. Sequentially consistent atomics make the sleep/wake handshake race-free: a worker
 * re-checks the generation under the mutex after announcing itself as a sleeper. */
#include "threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 50000

struct ht_pool {
    int n;
    pthread_t *threads;
    ht_job_fn fn;
    void *arg;
    atomic_uint gen;
    atomic_int pending;
    atomic_int sleepers;
    atomic_int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct { ht_pool *p; int ith; } worker_arg;

static void *worker_main(void *v) {
    worker_arg wa = *(worker_arg *)v;
    free(v);
    ht_pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop) && spins < SPIN_ITERS) { cpu_relax(); spins++; }
        if (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->gen);
        p->fn(p->arg, wa.ith, p->n);
        atomic_fetch_sub(&p->pending, 1);
    }
    return NULL;
}

ht_pool *pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    ht_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
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

void pool_run(ht_pool *p, ht_job_fn fn, void *arg) {
    if (p->n == 1) { fn(arg, 0, 1); return; }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->n);
    /* spin while the others finish; yield if that takes long (an oversubscribed machine) */
    for (int spins = 0; atomic_load(&p->pending) > 0; spins++) {
        if (spins < SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
}
