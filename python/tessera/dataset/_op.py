"""The base of tessera.dataset's transforms: each is turned into data.transforms items."""


class Op:
    """A transform: its data.transforms items (dicts) given whether a to_float came before."""

    def items(self, have_float):
        raise NotImplementedError

    def __call__(self, *args):
        raise ValueError("%s: Tessera's transforms run in the C pipeline (give them to dataset.map(operations=...)); "
                         "they cannot be called on an array in Python" % type(self).__name__)
