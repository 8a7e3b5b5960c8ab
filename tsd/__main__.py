from tsd.cli import main

raise SystemExit(main())
