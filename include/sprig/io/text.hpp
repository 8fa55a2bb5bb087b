// sprig/io/text.hpp — forwarding header, kept for one release: the character-level text data
// set moved to sprig/data/text.hpp (data sets apart from serialisation); the names stay in
// namespace sprig. Include <sprig/data/text.hpp> instead.
#pragma once

#include "../data/text.hpp"
