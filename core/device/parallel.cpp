#include "core/device/parallel.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <mutex>

namespace tessel::core {

void parallel_ranges(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& f) {
  if (begin >= end) return;
  if (end - begin < 2 || omp_in_parallel() || omp_get_max_threads() < 2) {
    f(begin, end);
    return;
  }
  std::exception_ptr error;
  std::once_flag first;
  // No num_threads clause, as ATen's own regions: GOMP rebuilds its pool when the count changes.
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t part = (end - begin + threads - 1) / threads;
    const int64_t b = begin + t * part, e = std::min(end, b + part);
    if (b < e) {
      try {
        f(b, e);
      } catch (...) {
        std::call_once(first, [&] { error = std::current_exception(); });
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace tessel::core
