"""TRAINBOT_HOME, the bot's state folder: private to the bot's user.

It holds the store (SQLite by default), the code cache, every local job's folder (their models, logs and
checkpoints) and the local endpoints' records: nothing in it is for another user of the machine to read, so the
folder is made 0700, and a home made before this rule is tightened the first time a bot opens it.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

logger = logging.getLogger(__name__)


def secure_home(home: Path) -> Path:
    """``home`` made (0700) if missing; an existing one of this user's that others may read or enter is
    tightened to 0700. A folder of someone else's, or a shared sticky one such as /tmp, is left as it is and
    logged: its owner decides."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = home.stat()
    if not info.st_mode & 0o077:
        return home
    if info.st_uid != os.geteuid() or info.st_mode & stat.S_ISVTX:
        logger.warning("TRAINBOT_HOME %s may be read by other users of this machine; it is not the bot's own to "
                       "tighten: use a folder of the bot's own", home)
        return home
    os.chmod(home, 0o700)
    logger.info("TRAINBOT_HOME %s was readable by other users; now 0700", home)
    return home
