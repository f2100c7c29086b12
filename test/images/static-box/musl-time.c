/* Prints the wall clock as a musl program reads it: time() and clock_gettime(CLOCK_REALTIME). */
#include <stdio.h>
#include <time.h>

int main(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  printf("%ld %ld\n", (long)time(NULL), (long)ts.tv_sec);
  return 0;
}
