// titan-study: simulated MFU studies on the trainer's own step. A sweep file's combinations
// (--study), a layout search (--search) or both (a sweep file with [study] search = true),
// run in one process on every core; results to CSV / JSONL and PNG plots.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "study/study_cli.h"

int main(int argc, char** argv) {
  try {
    return titan::study::study_main(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const titan::Error& e) {
    std::fprintf(stderr, "titan-study: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan-study: %s\n", e.what());
    return 1;
  }
}
