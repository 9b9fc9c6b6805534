// Results as a human-readable table and as JSON.
#pragma once

#include "bench.hpp"
#include "options.hpp"

#include <string>

namespace vblk {

Json result_json(const Options& options, const RunResult& result);
std::string result_table(const Options& options, const RunResult& result);

} // namespace vblk
