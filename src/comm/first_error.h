// Agreeing on a failure across ranks (defined in communicator.cpp).
#pragma once

#include "zeroshard/comm.h"

#include <string>

namespace zeroshard {

// A collective: "" on every rank when every rank's `error` is empty, else the message of the
// lowest rank whose `error` is not, on every rank (the others append " (rank q)"). A rank that
// fails alone calls this instead of throwing, so the others never wait in a collective it will
// not join; the message travels with its size (a fixed-size gather of the flags, then its
// length, then its bytes).
std::string first_error(Communicator& comm, const std::string& error);

}  // namespace zeroshard
