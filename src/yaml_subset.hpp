#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "result.hpp"

namespace shim {

// The YAML that kubelet's configuration file and a static pod's manifest are written in, read as a
// tree of mappings, sequences and scalars, with nothing resolved: no types, no anchors, no tags.
// Enough for files that people and kubeadm write: block mappings and sequences (a sequence may sit
// at its key's indentation), flow collections as JSON writes them (so a JSON file, such as EKS's
// kubelet-config.json, reads too, also across lines), plain, 'single' and "double" quoted scalars,
// literal and folded block scalars (kept, not folded: only their presence matters here), comments,
// one document ("---" before it is fine). Anything else (anchors, aliases, tags, a second document,
// tabs in indentation, multi-line plain scalars) is an error naming the line: guessing would risk
// reading a number kubelet never sees.
struct yaml_node {
  enum class kind { scalar, mapping, sequence };
  kind type = kind::scalar;
  std::string text;     // a scalar's value (quotes removed, escapes applied)
  bool quoted = false;  // a quoted scalar is always a string, never a number
  // A sequence's items; a mapping's values, in file order, keys[i] being the key of items[i].
  // (Two vectors: a pair with the incomplete yaml_node inside yaml_node is not allowed.)
  std::vector<yaml_node> items;
  std::vector<std::string> keys;

  // The value of key in a mapping, or nullptr (also for a node that is not a mapping).
  const yaml_node* find(std::string_view key) const;
};

// Bounds: parsing is linear in the input, and these keep the tree small and the recursion shallow
// whatever the file says.
inline constexpr std::size_t kMaxYamlBytes = 256 * 1024;
inline constexpr std::size_t kMaxYamlDepth = 32;

// The whole text as one document. A duplicate key in a mapping is an error (Go's YAML decoders
// kubelet uses refuse them too).
result<yaml_node> parse_yaml_subset(std::string_view text);

}  // namespace shim
