// The real executor's wire format: the header every GlooTransport message begins with (an int64
// tensor), its encoding and its validation. A header carries a Message's fields, its payload's
// tensor count and shapes and, for a payload of at most kInlineFloats elements, the payload itself
// as float32 (kWInline = 1). A larger payload is split (kWInline = 2, kWLead = the lead's floats)
// in two messages that follow the header: on the same Gloo slot its lead, its first floats behind
// a short prefix (kLeadMagic, the lead's float count, the body's float count, zeros up to
// kWInlineData), and on a slot of its own its body, the remaining floats as they are in the
// sender's memory (no prefix, no copy on either side). Headers and leads fit the room a receiver
// keeps posted ahead (kHeaderWords); the body goes straight into its destination, which the
// receiver posts on reading the header, while the lead is still on its way (gloo_transport.h: why
// that matters).
//
// Contract: decode_header() and decode_lead() accept exactly what encode_header() and
// encode_lead() write (within the limits below) and throw rv::InputError naming the peer and the
// problem for anything else; they read no word beyond the `words` they are given and allocate
// nothing sized by the message. A body has no framing of its own: Gloo refuses one longer than the
// place posted for it (the connection fails), and its floats are the sender's to choose anyway.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/env.h"

namespace rv::wire {

constexpr int kMaxTensors = 8;  // payload tensors per message
constexpr int kMaxDims = 6;     // dimensions per payload tensor
// Payloads of at most this many floats (1 MiB) travel inside the header (gloo_transport.h: why);
// a split payload's lead is at most as long.
constexpr int64_t kInlineFloats = 262144;
constexpr int64_t kMagic = 0x52564e5404;      // "RVNT", wire format version 4 (lead and body)
constexpr int64_t kLeadMagic = 0x52564e5405;  // the lead of a payload announced right before it
constexpr int64_t kByeId = -1;                // kControl with this id: the sender closes
constexpr int64_t kBeatId = -2;  // kControl with this id: a heartbeat (real/liveness.h)
constexpr int64_t kHelloId =
    -3;  // kControl with this id: the first message, a proof (gloo_transport.h)
// A payload beyond 2^34 float32 elements (64 GiB) is taken for a corrupt header.
constexpr int64_t kMaxPayloadElems = int64_t{1} << 34;

// Header layout: int64 words.
enum HeaderWord : int {
  kWMagic = 0,
  kWKind,
  kWId,
  kWStep,
  kWAux,
  kWScalar,  // bits of a double
  kWBytes,   // modeled size, bytes
  kWCount,   // payload tensors
  kWElems,   // float32 elements in the payload, all tensors together
  kWInline,  // 1: the payload follows the shapes, inside the header; 2: split (a lead and a body
             // follow)
  kWLead,    // split: floats in the lead (1..kInlineFloats); else 0
  kWShapes,  // per tensor: rank, then kMaxDims sizes (unused ones 0)
};
constexpr int kWordsPerShape = 1 + kMaxDims;
constexpr int kWInlineData =
    kWShapes + kMaxTensors * kWordsPerShape;  // words before an inline payload
// The largest header, int64 words: what a receiver posts. A sender sends only the words it uses.
constexpr int kHeaderWords = kWInlineData + kInlineFloats / 2;

// Lead words (its floats begin at kWInlineData, as a header's inline payload).
enum LeadWord : int { kLMagic = 0, kLFloats, kLBodyFloats };

// Whether a payload of `elems` floats is split (a lead and a body follow its header).
inline bool is_split(int64_t elems) { return elems > kInlineFloats; }
// Floats in the lead of a split payload that this side sends (a receiver takes what the header
// says, 1..kInlineFloats): enough to cover the receiver's posting of the body (a wake-up and a
// notice back) on loopback, little enough that its two copies stay a small part of a payload of a
// few MB (bench_allreduce --part real, 4 MB states: median ratios to c10d 1.22-1.63 with 256 KiB
// leads, 1.37-1.74 with 1 MiB ones, three runs each, taking turns).
constexpr int64_t kLeadFloats = 65536;

// The header of `m` with `payload` (at most kMaxTensors tensors of at most kMaxDims dimensions,
// `elems` elements together). `flat`, if defined, is the flat payload (`elems` floats): the header
// carries it if it is not split. The header is as long as what it carries.
at::Tensor encode_header(const Message& m, const std::vector<at::Tensor>& payload, int64_t elems,
                         const at::Tensor& flat = at::Tensor());
// The lead of a split payload of `elems` floats at `flat`: a copy of its first `lead` floats. Its
// body is flat[lead, elems), sent as it is.
at::Tensor encode_lead(const float* flat, int64_t elems, int64_t lead);

struct Decoded {
  Message msg;  // its fields; no payload yet
  std::vector<std::vector<int64_t>> shapes;
  int64_t elems = 0;
  bool inline_payload = false;  // the payload's floats are at word kWInlineData
  bool split = false;           // a lead and a body follow
  int64_t lead = 0;             // split: the lead's floats; the body has the rest
};

// Validates a received header of `words` words (the room posted for it) from `peer`, whose
// payload may be at most `max_elems` (<= kMaxPayloadElems) elements.
Decoded decode_header(const int64_t* w, size_t words, int peer,
                      int64_t max_elems = kMaxPayloadElems);
// Validates a received lead of `words` words (the room posted for it) from `peer` as the lead of
// the split payload `d` announced; returns its d.lead floats (inside `w`). rv::InputError naming
// the peer for anything else (another message where the lead belongs, other lengths).
const float* decode_lead(const int64_t* w, size_t words, int peer, const Decoded& d);

}  // namespace rv::wire
