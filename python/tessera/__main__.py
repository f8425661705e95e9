"""python3 -m tessera: the package's version and job, or a YAML config trained through the package.

    python3 -m tessera                      version, rank and size
    python3 -m tessera train CONFIG [--set key=value ...]
        the config's zoo model trained by the same C trainer as `tessera train` (no progress bar;
        one line per log step)."""
import sys

import tessera
from tessera import _C


def main(argv):
    if not argv or argv[0] in ("--version", "version"):
        print("tessera %s (rank %d of %d)" % (tessera.__version__, tessera.get_rank(), tessera.get_group_size()))
        return 0
    if argv[0] != "train" or len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path, sets = argv[1], []
    rest = argv[2:]
    while rest:
        if rest[0] == "--set" and len(rest) > 1:
            sets.append(rest[1])
            rest = rest[2:]
        else:
            print("python3 -m tessera train: unknown argument %r" % rest[0], file=sys.stderr)
            return 2
    try:
        pairs = []
        for s in sets:
            k, _, v = s.partition("=")
            pairs.append((k, v))
        tessera.init()
        t = _C.Trainer(pairs, None, path)
        t.fit()
    except (ValueError, OSError, tessera.Error) as e:
        print("tessera: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
