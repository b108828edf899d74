/* The allreduce benchmark's MPI peer (bench/compare.sh): MPI_Allreduce of float32 sums, measured
 * exactly as `syncd-bench allreduce` measures syncd (nccl-tests' and OSU's definitions): time_us
 * is the mean of back-to-back calls after warm-up, averaged across ranks; lat_p50_us the median of
 * individually timed calls with a barrier outside the timed region, averaged across ranks;
 * algbw = bytes / time, busbw = algbw * 2(n-1)/n. One JSON line per size from rank 0, with the
 * same fields as syncd-bench's, and ranks_cpu_us: every rank's CPU (getrusage) over the back-to-back
 * calls, summed, per call (bench/engine_cost.sh sets it beside syncd's).
 *   mpirun -np 4 syncd-mpi-allreduce [--sizes 8,1K,64M] [--seconds 1] [--iters 1000] [--warmup 5] */
#include <mpi.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double MeanAcrossRanks(double v, int size) {
  double sum = 0;
  MPI_Allreduce(&v, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / size;
}

static double ProcessCpuS(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static long ParseSize(const char* s) {
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  if (*end == 'M' || *end == 'm') v <<= 20;
  if (*end == 'G' || *end == 'g') v <<= 30;
  return v;
}

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long sizes[64];
  int nsizes = 0, max_iters = 1000, warmup = 5;
  double seconds = 1.0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      for (char* tok = strtok(argv[++i], ","); tok && nsizes < 64; tok = strtok(NULL, ",")) sizes[nsizes++] = ParseSize(tok);
    } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = atof(argv[++i]);
    } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
      max_iters = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) {
      warmup = atoi(argv[++i]);
    }
  }
  if (nsizes == 0)
    for (long b = 8; b <= (64L << 20); b *= 2) sizes[nsizes++] = b;
  for (int s = 0; s < nsizes; ++s) {
    const long count = sizes[s] / (long)sizeof(float) > 0 ? sizes[s] / (long)sizeof(float) : 1;
    const long bytes = count * (long)sizeof(float);
    float* buf = malloc((size_t)bytes);
    for (long i = 0; i < count; ++i) buf[i] = (float)(rank + 1);
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0;
    for (long i = 0; i < count; ++i) wrong += buf[i] != (float)size * (size + 1) / 2;
    double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double t_est = MeanAcrossRanks(MPI_Wtime() - t0, size);
    int iters = (int)(seconds / 2 / (t_est > 1e-7 ? t_est : 1e-7));
    if (iters < 5) iters = 5;
    if (iters > max_iters) iters = max_iters;
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double cpu0 = ProcessCpuS();
    t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double mean_s = (MPI_Wtime() - t0) / iters;
    const double ranks_cpu_us = MeanAcrossRanks(ProcessCpuS() - cpu0, size) * size / iters * 1e6;
    double* lat = malloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      lat[i] = MPI_Wtime() - t;
    }
    qsort(lat, (size_t)iters, sizeof(double), CompareDoubles);
    const double time_us = MeanAcrossRanks(mean_s, size) * 1e6;
    const double p50_us = MeanAcrossRanks(lat[iters / 2], size) * 1e6;
    long wrong_total = 0;
    MPI_Reduce(&wrong, &wrong_total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    const double algbw = (double)bytes / (time_us * 1e-6) / 1e9;
    const double busbw = algbw * 2.0 * (size - 1) / size;
    if (rank == 0)
      printf("{\"op\":\"allreduce\",\"peer\":\"mpi\",\"bytes\":%ld,\"ranks\":%d,\"dtype\":\"float32\",\"time_us\":%.3f,"
             "\"lat_p50_us\":%.3f,\"algbw_GBps\":%.7f,\"busbw_GBps\":%.7f,\"iters\":%d,\"wrong\":%ld,"
             "\"ranks_cpu_us\":%.2f}\n",
             bytes, size, time_us, p50_us, algbw, busbw, iters, wrong_total, ranks_cpu_us);
    fflush(stdout);
    free(lat);
    free(buf);
  }
  MPI_Finalize();
  return 0;
}
