#include "real/wire_format.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace rv::wire {

namespace {

// A message of kWInlineData words, zero until its writer fills them, then `count` floats from
// `floats` packed two to a word (an odd count's last word padded with zeros).
at::Tensor message_words(const float* floats, int64_t count) {
  const int64_t words = kWInlineData + (count + 1) / 2;
  at::Tensor t = at::empty({words}, at::kLong);
  int64_t* w = t.data_ptr<int64_t>();
  std::memset(w, 0, sizeof(int64_t) * kWInlineData);
  if (count > 0) {
    w[words - 1] = 0;  // the odd float's other half
    std::memcpy(w + kWInlineData, floats, sizeof(float) * count);
  }
  return t;
}

}  // namespace

at::Tensor encode_header(const Message& m, const std::vector<at::Tensor>& payload, int64_t elems,
                         const at::Tensor& flat) {
  const int64_t carried = flat.defined() && !is_split(elems) ? elems : 0;
  at::Tensor h = message_words(carried > 0 ? flat.data_ptr<float>() : nullptr, carried);
  int64_t* w = h.data_ptr<int64_t>();
  w[kWMagic] = kMagic;
  w[kWKind] = static_cast<int64_t>(m.kind);
  w[kWId] = m.id;
  w[kWStep] = m.step;
  w[kWAux] = m.aux;
  std::memcpy(&w[kWScalar], &m.scalar, sizeof(double));
  w[kWBytes] = m.bytes;
  w[kWCount] = static_cast<int64_t>(payload.size());
  w[kWElems] = elems;
  for (size_t i = 0; i < payload.size(); ++i) {
    int64_t* s = w + kWShapes + i * kWordsPerShape;
    s[0] = payload[i].dim();
    for (int64_t d = 0; d < payload[i].dim(); ++d) s[1 + d] = payload[i].size(d);
  }
  if (flat.defined() && elems > 0) w[kWInline] = is_split(elems) ? 2 : 1;
  if (flat.defined() && is_split(elems)) w[kWLead] = kLeadFloats;
  return h;
}

at::Tensor encode_lead(const float* flat, int64_t elems, int64_t lead) {
  at::Tensor c = message_words(flat, lead);
  int64_t* w = c.data_ptr<int64_t>();
  w[kLMagic] = kLeadMagic;
  w[kLFloats] = lead;
  w[kLBodyFloats] = elems - lead;
  return c;
}

const float* decode_lead(const int64_t* w, size_t words, int peer, const Decoded& d) {
  auto bad = [peer](const std::string& what) {
    return InputError("malformed payload lead from peer " + std::to_string(peer) + ": " + what);
  };
  if (words < static_cast<size_t>(kWInlineData + (d.lead + 1) / 2))
    throw bad("a lead of " + std::to_string(d.lead) + " floats in " + std::to_string(words) +
              " words");
  if (w[kLMagic] != kLeadMagic) {
    throw bad("magic word " + std::to_string(w[kLMagic]) + " where the lead of a payload of " +
              std::to_string(d.elems) + " floats belongs");
  }
  if (w[kLFloats] != d.lead || w[kLBodyFloats] != d.elems - d.lead) {
    throw bad("a lead of " + std::to_string(w[kLFloats]) + " floats and a body of " +
              std::to_string(w[kLBodyFloats]) + " where " + std::to_string(d.lead) + " and " +
              std::to_string(d.elems - d.lead) + " belong");
  }
  return reinterpret_cast<const float*>(w + kWInlineData);
}

namespace {

InputError bad_header(int peer, const std::string& what) {
  return InputError("malformed message header from peer " + std::to_string(peer) + ": " + what);
}

// The message's fields, checked: its magic word, kind and size.
void decode_fields(const int64_t* w, size_t words, int peer, Decoded& d) {
  if (words < static_cast<size_t>(kWInlineData))
    throw bad_header(peer, "a header of " + std::to_string(words) + " words (at least " +
                               std::to_string(kWInlineData) + ")");
  if (w[kWMagic] != kMagic) {
    throw bad_header(peer, "magic word " + std::to_string(w[kWMagic]) + " is not " +
                               std::to_string(kMagic) +
                               " (not a ravnest peer, or another wire-format version)");
  }
  const int64_t kind = w[kWKind];
  if (kind < static_cast<int64_t>(MsgKind::kForward) ||
      kind > static_cast<int64_t>(MsgKind::kLast)) {
    throw bad_header(peer, "kind " + std::to_string(kind) + " is not a message kind (1.." +
                               std::to_string(static_cast<int>(MsgKind::kLast)) + ")");
  }
  d.msg.kind = static_cast<MsgKind>(kind);
  d.msg.id = w[kWId];
  d.msg.step = w[kWStep];
  d.msg.aux = w[kWAux];
  std::memcpy(&d.msg.scalar, &w[kWScalar], sizeof(double));
  d.msg.bytes = w[kWBytes];
  if (d.msg.bytes < 0)
    throw bad_header(peer, "negative size of " + std::to_string(d.msg.bytes) + " bytes");
}

// The payload's shapes into d.shapes, checked (at most kMaxTensors of at most kMaxDims, and
// `max_elems` elements in all); returns their elements.
int64_t decode_shapes(const int64_t* w, int peer, int64_t max_elems, Decoded& d) {
  const int64_t count = w[kWCount];
  if (count < 0 || count > kMaxTensors) {
    throw bad_header(
        peer, std::to_string(count) + " payload tensors (0.." + std::to_string(kMaxTensors) + ")");
  }
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t* s = w + kWShapes + i * kWordsPerShape;
    if (s[0] < 0 || s[0] > kMaxDims) {
      throw bad_header(peer, "tensor " + std::to_string(i) + " has " + std::to_string(s[0]) +
                                 " dimensions (0.." + std::to_string(kMaxDims) + ")");
    }
    std::vector<int64_t> shape(s + 1, s + 1 + s[0]);
    int64_t n = 1;
    for (int64_t size : shape) {
      if (size < 0 || size > kMaxPayloadElems) {
        throw bad_header(peer, "tensor " + std::to_string(i) + " has a dimension of size " +
                                   std::to_string(size));
      }
      if (size != 0 && n > kMaxPayloadElems / size) {
        throw bad_header(peer, "tensor " + std::to_string(i) + " has more than 2^34 elements");
      }
      n *= size;
    }
    total += n;
    if (total > max_elems) {
      throw bad_header(peer, "a payload of more than " + std::to_string(max_elems) + " elements" +
                                 (max_elems == kMaxPayloadElems
                                      ? std::string(" (2^34)")
                                      : std::string(", the most this run's plan can send")));
    }
    d.shapes.push_back(std::move(shape));
  }
  return total;
}

// How the payload of d.elems travels (inline up to kInlineFloats, split beyond, with a lead),
// checked against the header's `words`.
void decode_layout(const int64_t* w, size_t words, int peer, Decoded& d) {
  const int64_t total = d.elems;
  const int64_t flag = w[kWInline];
  if (flag != (total == 0 ? 0 : is_split(total) ? 2 : 1))
    throw bad_header(peer, "inline payload flag " + std::to_string(flag) + " for " +
                               std::to_string(total) + " elements");
  d.inline_payload = flag == 1;
  d.split = flag == 2;
  d.lead = w[kWLead];
  if (d.lead != 0 && !(d.split && d.lead >= 1 && d.lead <= kInlineFloats))
    throw bad_header(peer, "a lead of " + std::to_string(d.lead) + " floats for " +
                               std::to_string(total) + " elements");
  if (d.split && d.lead == 0)
    throw bad_header(peer,
                     "a split payload of " + std::to_string(total) + " elements without a lead");
  const int64_t carried = d.inline_payload ? total : 0;
  if (static_cast<size_t>(kWInlineData + (carried + 1) / 2) > words)
    throw bad_header(peer, "an inline payload of " + std::to_string(carried) +
                               " elements in a header of " + std::to_string(words) + " words");
}

}  // namespace

Decoded decode_header(const int64_t* w, size_t words, int peer, int64_t max_elems) {
  Decoded d;
  decode_fields(w, words, peer, d);
  const int64_t total = decode_shapes(w, peer, max_elems, d);
  if (w[kWElems] != total) {
    throw bad_header(peer, "payload size of " + std::to_string(w[kWElems]) +
                               " elements does not match its shapes (" + std::to_string(total) +
                               " elements)");
  }
  d.elems = total;
  // Every payload travels inline up to kInlineFloats, split beyond.
  decode_layout(w, words, peer, d);
  return d;
}

}  // namespace rv::wire
