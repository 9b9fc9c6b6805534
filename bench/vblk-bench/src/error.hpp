// Errors that end a run with a message for the user.
#pragma once

#include <stdexcept>
#include <string>

namespace vblk {

class BenchError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

} // namespace vblk
