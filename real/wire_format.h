// The real executor's wire format: the header every GlooTransport message begins with (an int64
// tensor), its encoding and its validation. A header carries a Message's fields, its payload's
// tensor count and shapes and, for a payload of at most kInlineFloats elements, the payload itself
// as float32 (kWInline = 1). A larger payload is chunked (kWInline = 2): the header carries its
// first kInlineFloats floats, and each further kInlineFloats (the last: what is left) follow as a
// chunk, a message of its own on the same Gloo slot, sent right behind the header: kChunkMagic,
// the chunk's index (1, 2, ...), its float count, zeros up to kWInlineData, then the floats. Every
// message thus fits the room a receiver keeps posted ahead (kHeaderWords), and no payload waits for
// its receiver to post room after reading its header (gloo_transport.h: why that matters).
//
// Contract: decode_header() accepts exactly what encode_header() writes (within the limits below)
// and throws rv::InputError naming the peer and the problem for anything else; it reads no word
// beyond the `words` it is given and allocates nothing sized by the header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/env.h"

namespace rv::wire {

constexpr int kMaxTensors = 8;  // payload tensors per message
constexpr int kMaxDims = 6;     // dimensions per payload tensor
// Payloads of at most this many floats (1 MiB) travel inside the header (gloo_transport.h: why).
constexpr int64_t kInlineFloats = 262144;
constexpr int64_t kMagic = 0x52564e5402;       // "RVNT", wire format version 2 (chunked payloads)
constexpr int64_t kChunkMagic = 0x52564e5403;  // a chunk of the payload announced before it
constexpr int64_t kByeId = -1;            // kControl with this id: the sender closes
constexpr int64_t kBeatId = -2;           // kControl with this id: a heartbeat (real/liveness.h)
constexpr int64_t kHelloId = -3;          // kControl with this id: the first message, a proof (gloo_transport.h)
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
  kWInline,  // 1: the payload follows the shapes, inside the header; 2: its first kInlineFloats do (chunked)
  kWShapes,  // per tensor: rank, then kMaxDims sizes (unused ones 0)
};
constexpr int kWordsPerShape = 1 + kMaxDims;
constexpr int kWInlineData = kWShapes + kMaxTensors * kWordsPerShape;  // words before an inline payload
// The largest header, int64 words: what a receiver posts. A sender sends only the words it uses.
constexpr int kHeaderWords = kWInlineData + kInlineFloats / 2;

// Chunk words (a chunk's floats begin at kWInlineData, as a header's inline payload).
enum ChunkWord : int { kCMagic = 0, kCIndex, kCFloats };

// The header of `m` with `payload` (at most kMaxTensors tensors of at most kMaxDims dimensions,
// `elems` elements together). `flat`, if defined, is the flat payload (`elems` floats): the header
// carries all of it (elems <= kInlineFloats) or its first kInlineFloats (chunked; encode_chunk
// makes the rest). The header is as long as what it carries.
at::Tensor encode_header(const Message& m, const std::vector<at::Tensor>& payload, int64_t elems,
                         const at::Tensor& flat = at::Tensor());
// Messages a payload of `elems` floats takes, its header included: 1 up to kInlineFloats.
int64_t message_count(int64_t elems);
// Chunk `index` (>= 1) of a payload of `elems` floats at `flat` (its floats from index *
// kInlineFloats on, at most kInlineFloats of them).
at::Tensor encode_chunk(const float* flat, int64_t elems, int64_t index);

struct Decoded {
  Message msg;  // its fields; no payload yet
  std::vector<std::vector<int64_t>> shapes;
  int64_t elems = 0;
  bool inline_payload = false;  // the payload's floats are at word kWInlineData
  bool chunked = false;         // its first kInlineFloats are there; message_count(elems) - 1 chunks follow
};

// Validates a received header of `words` words (the room posted for it) from `peer`, whose
// payload may be at most `max_elems` (<= kMaxPayloadElems) elements.
Decoded decode_header(const int64_t* w, size_t words, int peer, int64_t max_elems = kMaxPayloadElems);
// Validates a received chunk of `words` words (the room posted for it) from `peer` as chunk `index`
// of a payload of `elems` floats; returns its floats (inside `w`). rv::InputError naming the peer
// for anything else (another message where a chunk belongs, another index or length).
const float* decode_chunk(const int64_t* w, size_t words, int peer, int64_t elems, int64_t index);

}  // namespace rv::wire
