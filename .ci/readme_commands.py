"""Print the shell commands of the README's "## Set up" section, one per line (for .ci/run)."""

import re
import sys
from pathlib import Path

text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
section = re.search(r"^## Set up\n(.*?)(?=^## )", text, re.S | re.M)
if section is None:
    sys.exit("README.md has no '## Set up' section")
for block in re.findall(r"```bash\n(.*?)```", section.group(1), re.S):
    for line in block.strip().splitlines():
        print(line)
