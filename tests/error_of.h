// Test helper: runs `fn`, which must throw k3::Error, and returns its message.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace k3::test {

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no k3::Error thrown";
  return "";
}

}  // namespace k3::test
