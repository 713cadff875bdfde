from logtide.cli import main

raise SystemExit(main())
