module devstack.dev/kit/gitserver

go 1.22
