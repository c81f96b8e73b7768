/* threads.h — a persistent worker pool. Workers are started once (per context) and wait on a
 * spin-then-sleep barrier between jobs; a job runs fn(arg, ith, nth) once for every share ith < nth (nth =
 * the pool size): share 0 on the caller, each other share on whichever pool thread claims it first (the caller
 * too, once its own is done, so an asleep or descheduled worker does not hold the job up), and returns when all
 * are done. Shares never run concurrently with themselves. No thread is created or memory allocated per job. */
#ifndef HEARTH_THREADS_H
#define HEARTH_THREADS_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct ht_pool ht_pool;
typedef void (*ht_job_fn)(void *arg, int ith, int nth);

ht_pool *pool_new(int n_threads);
void pool_free(ht_pool *p);
int pool_size(const ht_pool *p);
void pool_run(ht_pool *p, ht_job_fn fn, void *arg);
/* While on, jobs run on the caller alone (fn(arg, 0, 1)), the workers left asleep: for passes too small to
 * pay for waking them. Jobs give the same bits whatever their share count, so this changes only the time. */
void pool_serial(ht_pool *p, bool on);
/* fn(arg, i0, i1) over n items, each share a contiguous range: for work where every item is computed alone, so
 * the split does not change a bit. Fewer than 2 items run on the caller. */
void pool_share(ht_pool *p, int n, void (*fn)(const void *arg, int i0, int i1), const void *arg);
/* Inside a job: waits until *count (incremented with release order by other shares) reaches n, spinning and
 * then yielding as the pool's own wait does. Only for counts of work already claimed by running shares. */
void pool_wait_count(const atomic_int *count, int n);

#endif
