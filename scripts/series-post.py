#!/usr/bin/env python3
"""Where each new file of the overlay enters the posted series.

    series-post.py ROOT PATCHES_DIR
    series-post.py --groups PATCHES_DIR
    series-post.py --reheader OLD_SERIES NEW_SERIES
    series-post.py --cover COVER_PATCH COVERS_DIR NAME TO_FILE NEEDS...

Prints one line per patch of patches/series, in order: the patch's file
name, then the overlay files that the posted form of that patch adds
(tab-separated).  scripts/qemu-tree post reads it.  With
--groups, prints the series of patches/series (its '#= NAME
NEEDS...' lines), one line each: name, first and last patch, and every
series it applies on.  With --reheader, prints NEW_SERIES (as export
wrote it) with the comments and '#=' lines of OLD_SERIES put back.  With
--cover, fills in the cover letter of series NAME.

A new file enters with the first patch that needs it:
  - a C file, with the first patch whose added lines name it in the
    meson.build of its directory;
  - a header, with the first patch that includes it, or with the first
    new file that includes it, whichever comes first;
  - a QAPI module, with the first patch that includes it in a schema;
  - a meson.build of a new directory, with the patch that adds subdir();
  - a test (tests/unit/test-NAME.c, tests/qtest/NAME-test.c), with the
    first patch whose added lines name it ('NAME') in the meson.build of
    its directory, as upstream's tests are listed;
  - a document, with the first patch that adds it to a toctree;
  - anything else, with the last patch.
A new file that grows over several patches has staged versions:
patches/stages/STEM/PATH is PATH as patch STEM (its file name without
the number and .patch) posts it.  The first stage must be the patch the
file enters with, and the last the overlay's file (a link to it), so
that the series ends with the file the overlay has.
"""

import os
import re
import subprocess
import sys

ROOT, PATCHES = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
OVERLAY_DIRS = ["hw", "block", "util", "include", "qapi", "tests", "docs"]
# Our tests: every overlay file that looks like one
TEST_RE = re.compile(r"^tests/(qtest/[^/]*-test|unit/test-[^/]*)\.c$")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def series():
    lines = read(os.path.join(PATCHES, "series")).splitlines()
    return [l.split("#")[0].strip() for l in lines if l.split("#")[0].strip()]


def added_lines(text):
    """{file touched: [added lines]} of one patch"""
    files, cur = {}, None
    for line in text.splitlines():
        if line.startswith("+++ b/"):
            cur = line[6:]
            files.setdefault(cur, [])
        elif cur and line.startswith("+") and not line.startswith("+++"):
            files[cur].append(line[1:])
    return files


def overlay_files():
    """The overlay's files as qemu-tree links them: tracked or new, not
    ignored (editor backups and build droppings stay out)"""
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "--"]
                         + OVERLAY_DIRS, check=True, capture_output=True,
                         text=True).stdout.splitlines()
    # The project's own reports and markdown (workflow) are not QEMU's
    return sorted(f for f in out
                  if not f.startswith("docs/bench") and
                  not (f.startswith("docs/") and f.endswith(".md")))


def includes(path):
    """Quoted #includes of a C file or header of the overlay"""
    if not path.endswith((".c", ".h")):
        return []
    return re.findall(r'^#include "([^"]+)"', read(os.path.join(ROOT, path)), re.M)


def header_key(path):
    """How a header is named in #include"""
    return path[len("include/"):] if path.startswith("include/") else path


def referenced_by(path, added):
    """Whether a patch's added lines ({file: lines}) ask for @path"""
    d, base = os.path.split(path)
    if path.endswith(".h"):
        key = header_key(path)
        return any(f'#include "{key}"' in l for ls in added.values() for l in ls)
    if path.endswith("/meson.build"):
        parent, sub = os.path.split(d)
        return any(f"subdir('{sub}')" in l
                   for l in added.get(os.path.join(parent, "meson.build"), []))
    if path.endswith(".json"):
        return any(f"'{base}'" in l for f, ls in added.items()
                   if f.startswith("qapi/") for l in ls)
    if TEST_RE.match(path):
        name = base[:-len(".c")]
        return any(f"'{name}'" in l for l in added.get(os.path.join(d, "meson.build"), []))
    if path.endswith(".c"):
        return any(f"'{base}'" in l for l in added.get(os.path.join(d, "meson.build"), []))
    if path.endswith(".rst"):
        return any(toctree_names(path, f, ls) for f, ls in added.items() if f.endswith(".rst"))
    return False


def toctree_names(doc, index, lines):
    """Whether @lines, added to the reST file @index, name @doc as a
    toctree entry (relative to @index's directory, with or without .rst)"""
    rel = os.path.relpath(doc, os.path.dirname(index))
    return any(l.strip() in (rel, os.path.splitext(rel)[0]) for l in lines)


def check_stages(names, need):
    """Each staged file enters with its first stage and ends with the
    overlay's file; every stage names a patch of the series"""
    top = os.path.join(PATCHES, "stages")
    if not os.path.isdir(top):
        return
    index = {stem(p)[:-len(".patch")]: i for i, p in enumerate(names)}
    stages = {}
    for d in sorted(os.listdir(top)):
        if d not in index:
            sys.exit(f"patches/stages/{d}: no such patch in patches/series")
        for base, _, fs in os.walk(os.path.join(top, d)):
            for f in fs:
                path = os.path.relpath(os.path.join(base, f), os.path.join(top, d))
                stages.setdefault(path, []).append((index[d], os.path.join(base, f)))
    for path, st in stages.items():
        st.sort()
        first, last = st[0], st[-1]
        if need.get(path) != first[0]:
            sys.exit(f"patches/stages: {path} enters with patch {need.get(path)} "
                     f"(from 0), its first stage is for patch {first[0]}")
        if read(last[1]) != read(os.path.join(ROOT, path)):
            sys.exit(f"patches/stages: the last stage of {path} is not the "
                     "overlay's file (make it a link to it)")


def main():
    names = series()
    texts = [read(os.path.join(PATCHES, p)) for p in names]
    added = [added_lines(t) for t in texts]
    files = overlay_files()
    last = len(names) - 1
    need = {}
    for f in files:
        need[f] = next((i for i in range(len(names)) if referenced_by(f, added[i])), None)
    # A file's headers come no later than the file
    changed = True
    while changed:
        changed = False
        for f in files:
            if need[f] is None:
                continue
            for inc in includes(f):
                for h in files:
                    named = header_key(h) == inc or \
                        os.path.join(os.path.dirname(f), inc) == h
                    if h.endswith(".h") and named and \
                       (need[h] is None or need[h] > need[f]):
                        need[h] = need[f]
                        changed = True
    check_stages(names, need)
    for i, p in enumerate(names):
        mine = [f for f in files if (need[f] if need[f] is not None else last) == i]
        print("\t".join([p] + mine))
    unlisted = [f for f in files if need[f] is None and TEST_RE.match(f)]
    if unlisted:
        sys.exit("no patch lists these tests in their directory's meson.build: "
                 + " ".join(unlisted))
    late = [f for f in files if need[f] is None]
    if late:
        print("# with the last patch, asked for by none: " + " ".join(late), file=sys.stderr)


GROUP_RE = re.compile(r"^#=\s*(\S+)((?:\s+\S+)*)\s*$")


def groups(lines):
    """[(name, needs, [patch, ...])] of patches/series' lines: a line
    '#= NAME NEEDS...' starts a series; NEEDS name earlier series"""
    out = []
    for n, line in enumerate(lines, 1):
        m = GROUP_RE.match(line)
        if m:
            needs = m.group(2).split()
            known = [g[0] for g in out]
            for d in needs:
                if d not in known:
                    sys.exit(f"patches/series:{n}: series {m.group(1)} needs '{d}', "
                             "which is not an earlier series")
            out.append((m.group(1), needs, []))
            continue
        patch = line.split("#")[0].strip()
        if patch:
            if not out:
                sys.exit(f"patches/series:{n}: {patch} is in no series "
                         "(a '#= NAME' line must come first)")
            out[-1][2].append(patch)
    return out


def closure(name, table):
    """The series @name applies on, all of them, in the file's order"""
    want, todo = set(), list(table[name])
    while todo:
        d = todo.pop()
        if d not in want:
            want.add(d)
            todo.extend(table[d])
    return want


def print_groups():
    """NAME<TAB>FIRST<TAB>LAST<TAB>NEEDS... (1-based patch numbers in the
    whole series; NEEDS with what they need in turn, in posting order)"""
    gs = groups(read(os.path.join(PATCHES, "series")).splitlines())
    table = {g[0]: g[1] for g in gs}
    n = 0
    for name, _, patches in gs:
        if not patches:
            sys.exit(f"patches/series: series {name} has no patches")
        needs = closure(name, table)
        print("\t".join([name, str(n + 1), str(n + len(patches))] +
                        [g[0] for g in gs if g[0] in needs]))
        n += len(patches)


def stem(patch):
    """A patch file's name without its number: what export keeps"""
    return re.sub(r"^\d{4}-", "", patch)


def reheader(old, new):
    """patches/series @new as 'git format-patch' wrote it, with the
    comments and '#=' lines of @old put back before the same patches"""
    before, pending = {}, []
    for line in read(old).splitlines():
        patch = line.split("#")[0].strip()
        if patch:
            before[stem(patch)] = pending
            pending = []
        else:
            pending.append(line)
    out = []
    for patch in read(new).split():
        out += before.pop(stem(patch), [])
        out.append(patch)
    lost = [l for ls in before.values() for l in ls if GROUP_RE.match(l)] + \
        [l for l in pending if GROUP_RE.match(l)]
    if lost:
        sys.exit("patches/series: the patch that started " + ", ".join(lost) +
                 " is gone or renamed; put the line back by hand")
    sys.stdout.write("\n".join(out + pending) + "\n")


def cover(path, covers, name, to, needs):
    """Fill in git format-patch's cover letter @path from @covers/@name
    (subject line, then the text), name the series it applies on, and
    copy the addresses of the file @to into Cc: headers"""
    subject, blurb = read(os.path.join(covers, name)).split("\n", 1)
    based = "".join("Based-on: %s (series '%s')\n"
                    % (read(os.path.join(covers, n)).split("\n", 1)[0].strip(), n)
                    for n in needs)
    body = read(path).replace("*** SUBJECT HERE ***", subject.strip())
    body = body.replace("*** BLURB HERE ***",
                        blurb.strip() + ("\n\n" + based.rstrip() if based else ""))
    head, sep, rest = body.partition("\n\n")
    cc = "".join("\nCc: " + a for a in read(to).splitlines() if a.strip())
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + cc + sep + rest)


if sys.argv[1] == "--groups":
    print_groups()
elif sys.argv[1] == "--reheader":
    reheader(sys.argv[2], sys.argv[3])
elif sys.argv[1] == "--cover":
    cover(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
else:
    main()
