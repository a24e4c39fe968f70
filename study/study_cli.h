// titan-study's command line: parses the options, runs the sweep or search, writes results,
// plots and traces. In the library so that the tests run it as the binary does.
#pragma once

#include <string>
#include <vector>

namespace titan::study {

// Returns the process exit status; bad input throws a config titan::Error.
int study_main(const std::vector<std::string>& args);

std::string study_usage();

}  // namespace titan::study
