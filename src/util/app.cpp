#include "pets/util/app.hpp"

#include <algorithm>
#include <boost/program_options/errors.hpp>
#include <map>
#include <string>

namespace pets {

namespace {

/// Reaches the substitutions of a Boost error (a protected member) through a derived class.
struct SubstitutionAccess : boost::program_options::error_with_option_name {
  static std::map<std::string, std::string>& of(boost::program_options::error_with_option_name& e) {
    return e.*(&SubstitutionAccess::m_substitutions);
  }
};

}  // namespace

std::string program_options_message(const boost::program_options::error& e) {
  namespace po = boost::program_options;
  const auto* named = dynamic_cast<const po::error_with_option_name*>(&e);
  if (named == nullptr) return e.what();
  // While Boost substitutes, each '%' of a user's value is a stand-in character, so no value
  // can hold a placeholder; the finished message gets its '%' back.
  constexpr char kStandIn = '\x1a';
  po::error_with_option_name copy(*named);
  for (auto& entry : SubstitutionAccess::of(copy))
    std::replace(entry.second.begin(), entry.second.end(), '%', kStandIn);
  std::string message = copy.what();
  std::replace(message.begin(), message.end(), kStandIn, '%');
  return message;
}

}  // namespace pets
