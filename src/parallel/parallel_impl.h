/* Internals shared by the files of src/parallel/. */
#ifndef TS_PARALLEL_IMPL_H
#define TS_PARALLEL_IMPL_H

#include <stddef.h>

#include "../base/text.h"

#endif
