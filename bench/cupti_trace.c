/* A kernel tracer for the GPU machine, where Nsight Systems cannot write a
 * report (/work/.library/device/KINDS.md): preloaded into a program
 * (LD_PRELOAD), it records every kernel the program runs through CUPTI's
 * activity API, graph nodes included (each node a record, its own start and
 * end on the GPU's clock: no events between kernels, so a decode step's
 * kernels keep their programmatic-dependent-launch overlap), and at exit
 * writes them to STRATA_TRACE_CSV in the columns of Nsight Systems'
 * cuda_gpu_trace report that bench/trace_summary.py reads ("Start (ns)",
 * "Duration (ns)", "Name").
 *
 * Build (on the GPU machine; bench/trace_decode.sh does it):
 *   gcc -O2 -shared -fPIC -I$CUDA/include bench/cupti_trace.c \
 *     -o build-rt/libcupti_trace.so -L$CUPTI_LIB -lcupti
 */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Records kept until exit: a decode run of a few hundred steps of ~1,000
 * kernels fits; past the cap the rest are counted and reported as dropped. */
enum { kCap = 1 << 21, kBuffer = 8 << 20 };

typedef struct {
  unsigned long long start, end;
  const char *name; /* CUPTI's, valid until the context is destroyed */
} Row;

static Row *rows;
static size_t count, dropped;

/* Names are copied: CUPTI's strings may not outlive the context, and the
 * tracer writes at exit, after the program has torn its context down. */
static const char *keep(const char *s) {
  static char *pool;
  static size_t used, cap;
  size_t n = strlen(s) + 1;
  if (used + n > cap) {
    cap = n > (1 << 20) ? n : (1 << 20);
    pool = malloc(cap);
    used = 0;
    if (!pool)
      return "?";
  }
  memcpy(pool + used, s, n);
  used += n;
  return pool + used - n;
}

static void CUPTIAPI requested(uint8_t **buf, size_t *size, size_t *max) {
  *buf = aligned_alloc(8, kBuffer);
  *size = *buf ? kBuffer : 0;
  *max = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buf,
                               size_t size, size_t valid) {
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *r = NULL;
  while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        r->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
    if (count == kCap) {
      ++dropped;
      continue;
    }
    rows[count].start = k->start;
    rows[count].end = k->end;
    rows[count].name = keep(k->name ? k->name : "?");
    ++count;
  }
  free(buf);
}

static void fail(const char *what, CUptiResult e) {
  const char *s = "?";
  cuptiGetResultString(e, &s);
  fprintf(stderr, "cupti_trace: %s: %s\n", what, s);
}

__attribute__((constructor)) static void start(void) {
  rows = malloc(sizeof(Row) * kCap);
  if (!rows) {
    fprintf(stderr, "cupti_trace: out of memory\n");
    return;
  }
  CUptiResult e = cuptiActivityRegisterCallbacks(requested, completed);
  if (e != CUPTI_SUCCESS)
    return fail("cuptiActivityRegisterCallbacks", e);
  /* CONCURRENT_KERNEL: kernels keep running concurrently (KERNEL would
   * serialise them). */
  e = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (e != CUPTI_SUCCESS)
    fail("cuptiActivityEnable", e);
  else if (getenv("STRATA_TRACE_VERBOSE"))
    fprintf(stderr, "cupti_trace: recording kernels\n");
}

static int byStart(const void *a, const void *b) {
  const Row *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

__attribute__((destructor)) static void finish(void) {
  CUptiResult e = cuptiActivityFlushAll(1);
  if (e != CUPTI_SUCCESS)
    fail("cuptiActivityFlushAll", e);
  const char *path = getenv("STRATA_TRACE_CSV");
  if (!rows || !path || !count)
    return; /* a process that ran no kernel leaves the file alone */
  qsort(rows, count, sizeof(Row), byStart);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cupti_trace: cannot write %s\n", path);
    return;
  }
  fprintf(f, "\"Start (ns)\",\"Duration (ns)\",\"Name\"\n");
  for (size_t i = 0; i < count; ++i)
    fprintf(f, "%llu,%llu,\"%s\"\n", rows[i].start,
            rows[i].end - rows[i].start, rows[i].name);
  fclose(f);
  fprintf(stderr, "cupti_trace: %zu kernels to %s%s\n", count, path,
          dropped ? " (some dropped: the cap)" : "");
}
