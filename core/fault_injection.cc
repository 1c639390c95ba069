#include "core/fault_injection.h"

#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace rv {

InjectedFault parse_fault(const std::string& text) {
  InjectedFault f;
  std::stringstream items(text);
  std::string item;
  const std::string extra = "in-flight+";
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    if (item == "allreduce-own") {
      f.allreduce_own = true;
    } else if (item.rfind(extra, 0) == 0 && item.size() > extra.size() &&
               item.find_first_not_of("0123456789", extra.size()) == std::string::npos &&
               item.size() - extra.size() <= 6 && std::stoll(item.substr(extra.size())) >= 1) {
      f.extra_in_flight = std::stoll(item.substr(extra.size()));
    } else {
      throw InputError(std::string(kFaultVariable) + ": unknown fault \"" + item +
                       "\" (known: allreduce-own, in-flight+N with N >= 1)");
    }
  }
  return f;
}

const InjectedFault& injected_fault() {
  static const InjectedFault fault = [] {
    const char* v = std::getenv(kFaultVariable);
    return parse_fault(v == nullptr ? "" : v);
  }();
  return fault;
}

}  // namespace rv
