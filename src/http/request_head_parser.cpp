#include "http/request_head_parser.hpp"

namespace shim {

void request_head_parser::on_request_impl(verb method, string_view method_string,
                                          string_view target, int version, error_code&) {
  // message::method() throws on verb::unknown: an unknown method keeps its text (and gets a 405).
  if (method == verb::unknown) {
    request_.method_string(method_string);
  } else {
    request_.method(method);
  }
  request_.target(target);
  request_.version(static_cast<unsigned>(version));
}

void request_head_parser::on_response_impl(int, string_view, int, error_code&) {}

void request_head_parser::on_field_impl(field name, string_view, string_view value, error_code&) {
  if (name == field::transfer_encoding) transfer_coded_ = true;
  // Only the mark of kubelet's probe, never the value: what is kept stays a constant.
  if (name == field::user_agent && value.starts_with(kKubeletProbeAgent)) {
    request_.set(field::user_agent, kKubeletProbeAgent);
  }
}

void request_head_parser::on_header_impl(error_code&) { request_.keep_alive(keep_alive()); }

void request_head_parser::on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) {}

std::size_t request_head_parser::on_body_impl(string_view body, error_code&) { return body.size(); }

void request_head_parser::on_chunk_header_impl(std::uint64_t, string_view, error_code&) {}

std::size_t request_head_parser::on_chunk_body_impl(std::uint64_t, string_view body, error_code&) {
  return body.size();
}

void request_head_parser::on_finish_impl(error_code&) {}

}  // namespace shim
