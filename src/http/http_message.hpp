#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace shim {

// The requests the readiness server parses and the responses it builds (in tests; the session
// writes its answers without building one).
using http_request = boost::beast::http::request<boost::beast::http::string_body>;
using http_response = boost::beast::http::response<boost::beast::http::string_body>;

}  // namespace shim
