// The event schema: one table of Event's fields (core/output/metrics.h) that drives every place an
// event is written or read: metrics.csv's header, its rows and its reader (by the header's names,
// so a file with fewer, reordered or older columns still reads), eval.csv (a projection of the
// kEval events), and the checkpoints' binary encoding (core/checkpoint/checkpoint.cc). The Python
// loaders (analysis/runs.py) read the files by their header and hold no column list of their own.
//
// Adding a field to Event: one row in kEventFields (event_schema.cc). Its column is appended to
// metrics.csv (files without it read with the field's default), and the checkpoint's encoding
// changes with it: bump the checkpoint magic (core/checkpoint/checkpoint.cc) so that older
// checkpoints are refused with a message rather than misread.
//
// Thread-safety: the tables are immutable; every function is safe to call from any thread.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <variant>
#include <vector>

#include "core/output/metrics.h"

namespace rv {

// A pointer to one of Event's members, by its type.
using EventMember = std::variant<EventKind Event::*, int Event::*, int64_t Event::*,
                                 double Event::*, std::vector<float> Event::*>;

// How a real field is written in CSV: kTime in fixed point with 9 decimals (start_s, end_s: a run
// of days keeps its nanoseconds; always a number), kReal with 9 significant digits, NaN as an
// empty field. Integer and kind fields ignore it.
enum class CsvFormat { kDefault, kTime, kReal };

struct EventField {
  const char* column;  // metrics.csv's column; nullptr: not in metrics.csv (checkpoints only)
  EventMember member;
  CsvFormat format = CsvFormat::kDefault;
  // A column a metrics.csv must have to be read (the others take Event{}'s value when absent).
  bool required = false;
};

// Every field of Event, in metrics.csv's column order and the checkpoints' encoding order.
const std::vector<EventField>& event_fields();

// eval.csv's columns: each a name and the Event field it shows (the kEval events).
struct EvalColumn {
  const char* column;
  EventMember member;
  CsvFormat format = CsvFormat::kDefault;
};
const std::vector<EvalColumn>& eval_columns();

// Calls f(field, value) for each field of `e` in table order, `value` a reference to the member
// (const when `e` is): the checkpoints encode and decode events with it.
template <class E, class F>
void for_each_event_field(E& e, F&& f) {
  for (const EventField& field : event_fields())
    std::visit([&](auto member) { f(field, e.*member); }, field.member);
}

// The smallest encoding of one event in a checkpoint (every fixed-size field, and the count of an
// empty array): a count of events beyond what a buffer can hold is malformed before allocation.
size_t min_encoded_event_bytes();

// metrics.csv and eval.csv headers (no "\n").
const std::string& metrics_csv_header();
const std::string& eval_csv_header();

// One metrics.csv row (nothing for kParams: params.csv), one eval.csv row (of a kEval event),
// each with its "\n".
void append_event_row(std::ostream& os, const Event& e);
void append_eval_row(std::ostream& os, const Event& e);

// metrics.csv's text: the header, then a row per event but kParams.
std::string events_csv(const std::vector<Event>& events);

// Reads metrics.csv text by its header's names: the columns may come in any order and the ones
// not required may be missing (their fields keep Event{}'s value). Throws rv::InputError naming
// `where` and the line for an unknown or repeated column, a missing required one, a row of another
// width, an unknown event kind or a field that is not a number.
std::vector<Event> parse_events_csv(std::istream& in, const std::string& where);

}  // namespace rv
