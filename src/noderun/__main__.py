import sys

from noderun.cli import main

sys.exit(main())
