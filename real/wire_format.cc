#include "real/wire_format.h"

#include <cstring>
#include <string>

#include <ATen/ATen.h>

#include "core/error.h"

namespace rv::wire {

at::Tensor encode_header(const Message& m, const std::vector<at::Tensor>& payload, int64_t elems,
                         const at::Tensor& inline_flat) {
  const int64_t words = kWInlineData + (inline_flat.defined() ? (elems + 1) / 2 : 0);
  at::Tensor h = at::empty({words}, at::kLong);
  int64_t* w = h.data_ptr<int64_t>();
  std::memset(w, 0, sizeof(int64_t) * kWInlineData);
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
  if (inline_flat.defined()) {
    w[kWInline] = 1;
    w[words - 1] = 0;  // the odd float's other half
    std::memcpy(w + kWInlineData, inline_flat.data_ptr<float>(), sizeof(float) * elems);
  }
  return h;
}

Decoded decode_header(const int64_t* w, size_t words, int peer, int64_t max_elems) {
  auto bad = [peer](const std::string& what) {
    return InputError("malformed message header from peer " + std::to_string(peer) + ": " + what);
  };
  if (words < static_cast<size_t>(kWInlineData))
    throw bad("a header of " + std::to_string(words) + " words (at least " + std::to_string(kWInlineData) + ")");
  if (w[kWMagic] != kMagic) {
    throw bad("magic word " + std::to_string(w[kWMagic]) + " is not " + std::to_string(kMagic) +
              " (not a ravnest peer, or another wire-format version)");
  }
  Decoded d;
  const int64_t kind = w[kWKind];
  if (kind < static_cast<int64_t>(MsgKind::kForward) ||
      kind > static_cast<int64_t>(MsgKind::kLast)) {
    throw bad("kind " + std::to_string(kind) + " is not a message kind (1.." + std::to_string(static_cast<int>(MsgKind::kLast)) + ")");
  }
  d.msg.kind = static_cast<MsgKind>(kind);
  d.msg.id = w[kWId];
  d.msg.step = w[kWStep];
  d.msg.aux = w[kWAux];
  std::memcpy(&d.msg.scalar, &w[kWScalar], sizeof(double));
  d.msg.bytes = w[kWBytes];
  if (d.msg.bytes < 0) throw bad("negative size of " + std::to_string(d.msg.bytes) + " bytes");
  const int64_t count = w[kWCount];
  if (count < 0 || count > kMaxTensors) {
    throw bad(std::to_string(count) + " payload tensors (0.." + std::to_string(kMaxTensors) + ")");
  }
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t* s = w + kWShapes + i * kWordsPerShape;
    if (s[0] < 0 || s[0] > kMaxDims) {
      throw bad("tensor " + std::to_string(i) + " has " + std::to_string(s[0]) +
                " dimensions (0.." + std::to_string(kMaxDims) + ")");
    }
    std::vector<int64_t> shape(s + 1, s + 1 + s[0]);
    int64_t n = 1;
    for (int64_t size : shape) {
      if (size < 0 || size > kMaxPayloadElems) {
        throw bad("tensor " + std::to_string(i) + " has a dimension of size " +
                  std::to_string(size));
      }
      if (size != 0 && n > kMaxPayloadElems / size) {
        throw bad("tensor " + std::to_string(i) + " has more than 2^34 elements");
      }
      n *= size;
    }
    total += n;
    if (total > max_elems) {
      throw bad("a payload of more than " + std::to_string(max_elems) + " elements" +
                (max_elems == kMaxPayloadElems ? std::string(" (2^34)") : std::string(", the most this run's plan can send")));
    }
    d.shapes.push_back(std::move(shape));
  }
  if (w[kWElems] != total) {
    throw bad("payload size of " + std::to_string(w[kWElems]) +
              " elements does not match its shapes (" + std::to_string(total) + " elements)");
  }
  d.elems = total;
  if (w[kWInline] != 0 && (w[kWInline] != 1 || total > kInlineFloats))
    throw bad("inline payload flag " + std::to_string(w[kWInline]) + " for " + std::to_string(total) + " elements");
  d.inline_payload = w[kWInline] == 1;
  if (d.inline_payload && static_cast<size_t>(kWInlineData + (total + 1) / 2) > words)
    throw bad("an inline payload of " + std::to_string(total) + " elements in a header of " + std::to_string(words) + " words");
  return d;
}

}  // namespace rv::wire
