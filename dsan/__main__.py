from dsan.cli import main

raise SystemExit(main())
