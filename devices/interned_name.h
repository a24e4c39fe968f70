// InternedName: a name held as a pointer into a process-wide pool of strings that is never
// freed: a recorded op's aten name, a collective's group and stream. A step holds thousands of
// ops and collectives named from a few hundred names, and every copy of a recorded step (a
// study resizes and derives many) copied each; about a third of op names do not fit a
// std::string's inline buffer ("aten::empty_strided"), so each was an allocation. Copies are
// free, equal names compare by pointer, and the string it reads stays valid for the process's
// life.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

namespace titan::devices {

// Converts to and from a string implicitly, so that it reads like one where names are used.
class InternedName {
 public:
  InternedName();  // ""
  InternedName(std::string_view name);
  InternedName(const std::string& name) : InternedName(std::string_view(name)) {}
  InternedName(const char* name) : InternedName(std::string_view(name)) {}

  const std::string& str() const { return *name_; }
  operator const std::string&() const { return *name_; }
  bool empty() const { return name_->empty(); }
  size_t size() const { return name_->size(); }

  friend bool operator==(const InternedName& a, const InternedName& b) { return a.name_ == b.name_; }
  friend bool operator!=(const InternedName& a, const InternedName& b) { return a.name_ != b.name_; }
  friend bool operator==(const InternedName& a, std::string_view b) { return *a.name_ == b; }
  friend bool operator!=(const InternedName& a, std::string_view b) { return *a.name_ != b; }
  friend bool operator==(const InternedName& a, const char* b) { return *a.name_ == b; }
  friend bool operator!=(const InternedName& a, const char* b) { return *a.name_ != b; }
  friend bool operator==(const InternedName& a, const std::string& b) { return *a.name_ == b; }
  friend bool operator!=(const InternedName& a, const std::string& b) { return *a.name_ != b; }
  friend std::string operator+(const InternedName& a, const std::string& b) { return *a.name_ + b; }
  friend std::string operator+(const InternedName& a, const char* b) { return *a.name_ + b; }
  friend std::string operator+(const std::string& a, const InternedName& b) { return a + *b.name_; }
  friend std::string operator+(const char* a, const InternedName& b) { return a + *b.name_; }
  friend std::ostream& operator<<(std::ostream& os, const InternedName& n) { return os << *n.name_; }

 private:
  const std::string* name_;
};

}  // namespace titan::devices
