"""`python -m langchain_memalign.cli`."""

import sys

from langchain_memalign.cli.app import main

sys.exit(main())
