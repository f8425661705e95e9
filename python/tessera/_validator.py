"""Argument checks shared by the public surface (MindSpore's _checkparam.Validator, its message
shape: "For 'Dense', the 'out_channels' must be an int, but got float 16.7.").

A wrong type is a TypeError, a value out of range a ValueError, each naming the function or
layer, the argument and the value. Integers: Python ints and numpy integers (returned as int);
bool is refused (True is not a size), and so are floats, even whole ones (16.0), as MindSpore
refuses them. Floats: any real number but bool (ints are floats). Nothing is truncated or
coerced silently."""
import numbers

__all__ = ["check_int", "check_int_list", "check_int_or_tuple", "check_bool", "check_float", "describe"]


def describe(v):
    """`float 16.7`: the type and (short) value of an argument for a message."""
    r = repr(v)
    if len(r) > 60:
        r = r[:57] + "..."
    return "%s %s" % (type(v).__name__, r)


def _for(where, name):
    return ("For '%s', the '%s'" % (where, name)) if where else ("The '%s'" % name)


def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and type(v).__name__ != "bool_"


def _range_text(minimum, maximum):
    if maximum is not None and minimum is not None:
        return "an int in [%d, %d]" % (minimum, maximum)
    if minimum == 1:
        return "a positive int"
    if minimum == 0:
        return "a non-negative int"
    if minimum is not None:
        return "an int >= %d" % minimum
    return "an int <= %d" % maximum


def check_int(value, name, where, minimum=None, maximum=None, allow_none=False, also=()):
    """value as a Python int (an int or a numpy integer); None where allow_none; values in `also`
    (e.g. -1 for "endless") pass the range check."""
    if value is None and allow_none:
        return None
    if not _is_int(value):
        raise TypeError("%s must be an int%s, but got %s." % (_for(where, name), " or None" if allow_none else "",
                                                              describe(value)))
    v = int(value)
    if v in also:
        return v
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        extra = "".join(" or %d" % a for a in also)
        raise ValueError("%s must be %s%s, but got %d." % (_for(where, name), _range_text(minimum, maximum), extra, v))
    return v


def check_int_list(value, name, where, minimum=None):
    """A list/tuple of ints (each checked as check_int), as a list."""
    if not isinstance(value, (list, tuple)):
        raise TypeError("%s must be a list or tuple of ints, but got %s." % (_for(where, name), describe(value)))
    out = []
    for i, v in enumerate(value):
        if not _is_int(v):
            raise TypeError("%s must be a list or tuple of ints, but element %d is %s."
                            % (_for(where, name), i, describe(v)))
        out.append(check_int(v, "%s[%d]" % (name, i), where, minimum))
    return out


def check_int_or_tuple(value, name, where, n=2, minimum=None, lengths=None):
    """An int, or a tuple/list of ints of a length in `lengths` (default (1, n)): the tuple of ints
    given (an int repeated n times; a 1-tuple repeated to n where n is in lengths' default)."""
    lengths = lengths or (1, n)
    if _is_int(value):
        return (check_int(value, name, where, minimum),) * n
    if not isinstance(value, (tuple, list)):
        raise TypeError("%s must be an int or a tuple of %s ints, but got %s."
                        % (_for(where, name), " or ".join(str(k) for k in lengths), describe(value)))
    if len(value) not in lengths:
        raise ValueError("%s must be an int or a tuple of %s ints, but got %r (%d values)."
                         % (_for(where, name), " or ".join(str(k) for k in lengths), tuple(value), len(value)))
    t = []
    for i, v in enumerate(value):
        if not _is_int(v):
            raise TypeError("%s must be an int or a tuple of ints, but element %d is %s."
                            % (_for(where, name), i, describe(v)))
        t.append(check_int(v, "%s[%d]" % (name, i), where, minimum))
    if len(t) == 1:
        t = t * n
    return tuple(t)


def check_bool(value, name, where, allow_none=False):
    """value as a bool: a bool or a numpy bool (not 0/1, not a string)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError("%s must be a bool%s, but got %s." % (_for(where, name), " or None" if allow_none else "",
                                                         describe(value)))


def check_float(value, name, where, minimum=None, maximum=None, allow_none=False, min_open=False):
    """value as a float: an int, float or numpy number (not bool, not a string)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or type(value).__name__ == "bool_":
        raise TypeError("%s must be a float%s, but got %s." % (_for(where, name), " or None" if allow_none else "",
                                                              describe(value)))
    v = float(value)
    bad = (minimum is not None and (v < minimum or (min_open and v == minimum))) or \
        (maximum is not None and v > maximum) or v != v
    if bad:
        lo = "" if minimum is None else ("> %g" % minimum if min_open else ">= %g" % minimum)
        hi = "" if maximum is None else "<= %g" % maximum
        raise ValueError("%s must be %s, but got %r." % (_for(where, name), " and ".join(x for x in (lo, hi) if x)
                                                         or "a number", value))
    return v
