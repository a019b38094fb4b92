//! Sans-IO HTTP/1.1 server codec. (Being written.)
