module devstack.dev/kit/fileserver

go 1.22
