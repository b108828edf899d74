/* The partial-collective benchmark's peer (bench/partial.sh): MPI_Allreduce under the same linear
 * skew as `syncd-bench partial` (each round: barrier, rank r waits r x skew ms, one timed call),
 * as eager-SGD's paper compares with. Prints one JSON object from rank 0.
 *   mpirun -np 16 syncd-mpi-partial [rounds] [warmup] [skew_ms] [bytes] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int rounds = argc > 1 ? atoi(argv[1]) : 40, warmup = argc > 2 ? atoi(argv[2]) : 3;
  const double skew_ms = argc > 3 ? atof(argv[3]) : 1.0;
  const long bytes = argc > 4 ? atol(argv[4]) : 64 * 1024;
  const int n = (int)(bytes / (long)sizeof(float));
  float* data = malloc((size_t)n * sizeof(float) + 1);
  double sum = 0, max = 0;
  for (int r = 0; r < warmup + rounds; ++r) {
    for (int i = 0; i < n; ++i) data[i] = 1;
    MPI_Barrier(MPI_COMM_WORLD);
    usleep((useconds_t)(skew_ms * 1000 * rank));
    const double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, data, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double dt = MPI_Wtime() - t0;
    if (r < warmup) continue;
    sum += dt;
    if (dt > max) max = dt;
  }
  double total = 0, worst = 0;
  MPI_Reduce(&sum, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&max, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("{\"peer\":\"mpi\",\"ranks\":%d,\"mean_us\":%.1f,\"max_us\":%.1f,\"mean_nap\":%d}\n", size,
           1e6 * total / ((double)rounds * size), 1e6 * worst, size);
  free(data);
  MPI_Finalize();
  return 0;
}
