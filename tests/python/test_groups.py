# SPDX-License-Identifier: MIT
"""create(group=) and empty()/share(group=): a buffer's group named by name or gid (one
the caller is in; root: any), shown by list(); uid 65534 naming root's group is
refused; a group that does not exist is a clear error before anything is sent."""
import os

import numpy as np
import pytest

import gpushm
from conftest import other_user_env, run_python

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="names a group the test user "
                                "may not be in, and acts as uid 65534")


def owner_gid(conn, name):
    return next(b.owner_gid for b in conn.list() if b.name == name)


@needs_root
@pytest.mark.parametrize("group", [65534, "nogroup", "65534"])
def test_named_group(conn, name, group):
    conn.create(name, 64, mode=0o640, group=group).close()
    assert owner_gid(conn, name) == 65534
    conn.unlink(name)
    gpushm.share(name, np.zeros(3), group=group).close()
    assert owner_gid(conn, name) == 65534


def test_no_such_group(conn, name):
    with pytest.raises(gpushm.InvalidArgument, match="no group named 'no-such-group'"):
        conn.create(name, 64, group="no-such-group")
    with pytest.raises(ValueError):
        conn.create(name, 64, group=-2)
    # a gid by its digits, as gpushmctl --group takes it; not a sign, nor one past gid_t
    for bad in ("-2", "+0", " 0", "4294967295"):
        with pytest.raises(gpushm.InvalidArgument, match="no group named"):
            conn.create(name, 64, group=bad)
    # False and True are no gids: group=False was group 0
    for bad in (False, True):
        with pytest.raises(TypeError, match="a group name or gid"):
            conn.create(name, 64, group=bad)
    assert all(b.name != name for b in conn.list())


@needs_root
def test_not_a_member(conn, name):
    run_python(f"""
import gpushm
try:
    gpushm.connect().create({name!r}, 64, mode=0o660, group=0)
    raise SystemExit("uid 65534 gave a buffer root's group")
except gpushm.PermissionDenied as e:
    assert "is not in group 0" in str(e), e
""", user=65534, env=other_user_env(65534))
    assert all(b.name != name for b in conn.list(all=True))
