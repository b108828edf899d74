/* A user's C program against an installed syncd (tests/install/deb_test.sh builds it once with
 * pkg-config and once with find_package(syncd)): the version it was built against is the one it
 * loaded, and under `syncrun -n N` every rank's Max and Sum of [rank + 1, -(rank + 1)] are exact. */
#include <stdio.h>
#include <syncd/client.h>

int main(void) {
  if (syncd_version_code() != SYNCD_VERSION_CODE) {
    fprintf(stderr, "built against syncd %s, loaded %s\n", SYNCD_VERSION_STRING, syncd_version());
    return 1;
  }
  syncd_client* c;
  if (syncd_init(NULL, &c) != SYNCD_OK) {
    fprintf(stderr, "syncd_init: %s\n", syncd_last_error());
    return 1;
  }
  const int rank = syncd_rank(c), size = syncd_size(c);
  int64_t n = 2;
  float sum[2] = {(float)(rank + 1), (float)-(rank + 1)}, max[2] = {sum[0], sum[1]};
  syncd_tensor ts = {"check.sum", sum, SYNCD_FLOAT32, 1, &n, 0}, tm = {"check.max", max, SYNCD_FLOAT32, 1, &n, 0};
  syncd_handle hs, hm;
  if (syncd_allreduce_async(c, &ts, SYNCD_SUM, 1.0, 1.0, &hs) != SYNCD_OK ||
      syncd_allreduce_async(c, &tm, SYNCD_MAX, 1.0, 1.0, &hm) != SYNCD_OK || syncd_wait(c, hs, -1) != SYNCD_OK ||
      syncd_wait(c, hm, -1) != SYNCD_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, syncd_last_error());
    return 1;
  }
  const float total = (float)size * (float)(size + 1) / 2;
  const int exact = sum[0] == total && sum[1] == -total && max[0] == (float)size && max[1] == -1.0f;
  printf("rank %d of %d: syncd %s (shared-memory ABI %u): %s\n", rank, size, syncd_version(),
         syncd_shm_abi_version(), exact ? "exact" : "WRONG");
  syncd_shutdown(c);
  return exact ? 0 : 1;
}
