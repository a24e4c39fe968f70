// OpName: a recorded op's name, interned. A step holds thousands of ops named from a few
// hundred aten names, and every copy of a recorded step (a study resizes and derives many)
// copied each name; about a third do not fit a std::string's inline buffer
// ("aten::empty_strided"), so each was an allocation. An OpName is a pointer into a
// process-wide pool that is never freed, so copies are free and the string it reads stays
// valid for the process's life.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

namespace titan::devices {

// Converts to and from a string implicitly, so that it reads like one where names are used.
class OpName {
 public:
  OpName();  // ""
  OpName(std::string_view name);
  OpName(const std::string& name) : OpName(std::string_view(name)) {}
  OpName(const char* name) : OpName(std::string_view(name)) {}

  const std::string& str() const { return *name_; }
  operator const std::string&() const { return *name_; }
  bool empty() const { return name_->empty(); }
  size_t size() const { return name_->size(); }

  friend bool operator==(const OpName& a, const OpName& b) { return a.name_ == b.name_; }
  friend bool operator!=(const OpName& a, const OpName& b) { return a.name_ != b.name_; }
  friend bool operator==(const OpName& a, std::string_view b) { return *a.name_ == b; }
  friend bool operator!=(const OpName& a, std::string_view b) { return *a.name_ != b; }
  friend bool operator==(const OpName& a, const char* b) { return *a.name_ == b; }
  friend bool operator!=(const OpName& a, const char* b) { return *a.name_ != b; }
  friend bool operator==(const OpName& a, const std::string& b) { return *a.name_ == b; }
  friend bool operator!=(const OpName& a, const std::string& b) { return *a.name_ != b; }
  friend std::string operator+(const OpName& a, const std::string& b) { return *a.name_ + b; }
  friend std::string operator+(const OpName& a, const char* b) { return *a.name_ + b; }
  friend std::string operator+(const std::string& a, const OpName& b) { return a + *b.name_; }
  friend std::string operator+(const char* a, const OpName& b) { return a + *b.name_; }
  friend std::ostream& operator<<(std::ostream& os, const OpName& n) { return os << *n.name_; }

 private:
  const std::string* name_;
};

}  // namespace titan::devices
