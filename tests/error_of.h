// What a call under test throws, for tests of error messages.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "common/error.h"

namespace titan {

// The message `f` throws, or "no error" when it returns (which no needle matches, so a
// test looking for one fails with that text). With `kind`, an error of another kind, or an
// exception that is not a titan::Error, is also a test failure.
inline std::string error_of(const std::function<void()>& f,
                            std::optional<ErrorKind> kind = std::nullopt) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) EXPECT_EQ(e.kind(), *kind) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    if (kind) ADD_FAILURE() << "not a titan::Error: " << e.what();
    return e.what();
  }
  return "no error";
}

}  // namespace titan
