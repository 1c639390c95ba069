// Choices as types: a scenario key whose value is one of a few words is stored as an enum, and the
// words live in one table per enum, a specialisation of ChoiceNames beside the enum:
//
//   enum class Averaging { kBulkSync, kOverlapped };
//   template <> struct ChoiceNames<Averaging> {
//     static constexpr ChoiceName<Averaging> kNames[] = {{Averaging::kBulkSync, "bulk-sync"}, ...};
//   };
//
// The key table (core/scenario/keys.cc) parses the word once into the enum and writes it back;
// the rest of the code compares enum values, so a misspelt choice does not compile. The order of
// kNames is the order the choices are documented in.
//
// Thread-safety: constant tables; every function is safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace rv {

template <class E>
struct ChoiceName {
  E value;
  const char* name;
};

// Specialised for each choice enum with `static constexpr ChoiceName<E> kNames[]`.
template <class E>
struct ChoiceNames;

// The word of `value` ("bulk-sync"); "?" for a value outside the table (a cast from a bad int).
template <class E>
constexpr const char* name_of(E value) {
  for (const ChoiceName<E>& c : ChoiceNames<E>::kNames)
    if (c.value == value) return c.name;
  return "?";
}

// The value a word names; nullopt for a word outside the table.
template <class E>
std::optional<E> choice_of(std::string_view name) {
  for (const ChoiceName<E>& c : ChoiceNames<E>::kNames)
    if (name == c.name) return c.value;
  return std::nullopt;
}

// Every word, in the documented order.
template <class E>
std::vector<std::string> choice_names() {
  std::vector<std::string> out;
  for (const ChoiceName<E>& c : ChoiceNames<E>::kNames) out.emplace_back(c.name);
  return out;
}

// Whether E has a word table (the key table's rows pick their conversion by it).
template <class E, class = void>
struct is_choice : std::false_type {};
template <class E>
struct is_choice<E, std::void_t<decltype(ChoiceNames<E>::kNames)>> : std::true_type {};
template <class E>
inline constexpr bool is_choice_v = is_choice<E>::value;

}  // namespace rv
